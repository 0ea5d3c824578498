/**
 * Codecs against PROTOCOL.md: every hex vector of section 11, job map encoding and checks,
 * result and event decoding.
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { decode as msgpackDecode, encode as msgpackEncode } from "@msgpack/msgpack";

import {
  buildJobMap,
  decodeEvent,
  decodeJob,
  decodeResult,
  encodeJob,
  ExitedEvent,
  InvalidArgumentError,
  JobDecodeError,
  OutputEvent,
  ProtocolError,
  Result,
  StartedEvent,
  UnknownEvent,
  validJobId,
  type Job,
} from "../src/index.js";
import { REJECTION_VECTORS, VECTOR_STARTED, VECTOR_T1, VECTOR_T2 } from "./support/vectors.js";

function pack(v: unknown): Buffer {
  const u = msgpackEncode(v);
  return Buffer.from(u.buffer, u.byteOffset, u.byteLength);
}

describe("section 11 vectors", () => {
  test("job t1 encodes byte for byte", () => {
    assert.deepEqual(encodeJob(buildJobMap({ id: "t1", shell: "echo hi" })), VECTOR_T1);
  });

  test("job t2 encodes byte for byte", () => {
    const m = buildJobMap({ id: "t2", argv: ["/bin/echo", "a b"], env: { X: "1" }, timeoutMs: 5000 });
    assert.deepEqual(encodeJob(m), VECTOR_T2);
  });

  test("job t2: the order of the caller's fields does not matter", () => {
    const m = buildJobMap({ timeoutMs: 5000, env: new Map([["X", "1"]]), argv: ["/bin/echo", "a b"], id: "t2" });
    assert.deepEqual(encodeJob(m), VECTOR_T2);
  });

  test("t1 and t2 decode", () => {
    assert.deepEqual(decodeJob(VECTOR_T1), { id: "t1", shell: "echo hi" });
    assert.deepEqual(decodeJob(VECTOR_T2), {
      id: "t2",
      argv: ["/bin/echo", "a b"],
      env: { X: "1" },
      timeoutMs: 5000,
    });
  });

  for (const [name, bytes, code] of REJECTION_VECTORS) {
    test(`rejection vector ${name} is ${code}`, () => {
      assert.throws(
        () => decodeJob(bytes),
        (e: unknown) => e instanceof JobDecodeError && e.code === code,
      );
    });
  }

  test("the started event of attempt 1 of t1 on worker w", () => {
    const ev = decodeEvent(VECTOR_STARTED);
    assert.ok(ev instanceof StartedEvent);
    assert.deepEqual([ev.type, ev.seq, ev.worker, ev.attempt], ["started", 0, "w", 1]);
    // and the map encodes to the vector in that key order
    assert.deepEqual(pack({ v: 1, type: "started", seq: 0, worker: "w", attempt: 1 }), VECTOR_STARTED);
  });
});

describe("job map", () => {
  test("field order and types of a full job", () => {
    const m = buildJobMap({
      id: "j",
      argv: ["a"],
      env: { B: "2", A: "1" },
      cwd: "/tmp",
      stdin: "é",
      timeoutMs: 1,
      maxOutputBytes: 0,
      retries: 5,
      template: "default",
      memoryBytes: 1 << 30,
      pids: 10,
      cpuTimeMs: 100,
    });
    assert.deepEqual(Object.keys(m), [
      "v",
      "id",
      "argv",
      "env",
      "cwd",
      "stdin",
      "timeout_ms",
      "max_output_bytes",
      "retries",
      "template",
      "memory_bytes",
      "pids",
      "cpu_time_ms",
    ]);
    assert.deepEqual(Object.keys(m.env ?? {}), ["B", "A"]); // the caller's order is kept
    const raw = encodeJob(m);
    // stdin is msgpack bin (0xc4), UTF-8 encoded when given as a string
    assert.ok(raw.includes(Buffer.from("a5737464696ec402c3a9", "hex")));
    const back = msgpackDecode(raw) as Record<string, unknown>;
    assert.deepEqual(Buffer.from(back.stdin as Uint8Array), Buffer.from([0xc3, 0xa9]));
    assert.equal(back.memory_bytes, 1 << 30);
  });

  test("code jobs carry their runtime right after the code", () => {
    const m = buildJobMap({ id: "c", code: "print(1)", runtime: "python", env: { A: "1" } });
    assert.deepEqual(Object.keys(m), ["v", "id", "code", "runtime", "env"]);
  });

  test("binary stdin is kept exactly", () => {
    const data = Buffer.alloc(768);
    for (let i = 0; i < data.length; i++) data[i] = i % 256;
    for (const given of [data, new Uint8Array(data), data.buffer.slice(data.byteOffset, data.byteOffset + 768)]) {
      const back = msgpackDecode(encodeJob(buildJobMap({ id: "j", shell: "cat", stdin: given }))) as Record<
        string,
        unknown
      >;
      assert.deepEqual(Buffer.from(back.stdin as Uint8Array), data);
    }
  });

  test("undefined fields are left out", () => {
    const m = buildJobMap({ id: "j", shell: "x", cwd: undefined, env: undefined, timeoutMs: undefined });
    assert.deepEqual(Object.keys(m), ["v", "id", "shell"]);
  });

  test("server limits are left to the daemon", () => {
    const m = buildJobMap({
      id: "j",
      shell: "x".repeat(2 << 20),
      timeoutMs: 1e9,
      maxOutputBytes: 2 ** 40,
      retries: 99,
      stdin: Buffer.alloc(17 << 20),
    });
    assert.equal(m.timeout_ms, 1e9);
    assert.equal(m.retries, 99);
  });

  const BAD: [string, unknown][] = [
    ["neither", {}],
    ["argv and shell", { argv: ["a"], shell: "a" }],
    ["argv and code", { argv: ["a"], code: "a", runtime: "python" }],
    ["empty argv", { argv: [] }],
    ["argv a string", { argv: "ls -l" }],
    ["argv a Buffer", { argv: Buffer.from("ls") }],
    ["empty argv[0]", { argv: [""] }],
    ["argv with a number", { argv: ["a", 1] }],
    ["argv with bytes", { argv: ["a", Buffer.from("b")] }],
    ["argv with NUL", { argv: ["a\0b"] }],
    ["shell a number", { shell: 3 }],
    ["shell with NUL", { shell: "a\0" }],
    ["shell with a lone surrogate", { shell: "a\ud800" }],
    ["code without runtime", { code: "print(1)" }],
    ["runtime without code", { shell: "x", runtime: "python" }],
    ["unknown runtime", { code: "x", runtime: "ruby" }],
    ["env name with a digit first", { shell: "x", env: { "1X": "a" } }],
    ["env name with a dash", { shell: "x", env: { "A-B": "a" } }],
    ["empty env name", { shell: "x", env: { "": "a" } }],
    ["env value a number", { shell: "x", env: { A: 1 } }],
    ["env value with NUL", { shell: "x", env: { A: "a\0" } }],
    ["env an array of pairs", { shell: "x", env: [["A", "b"]] }],
    ["env a string", { shell: "x", env: "A=b" }],
    ["relative cwd", { shell: "x", cwd: "work" }],
    ["cwd with NUL", { shell: "x", cwd: "/a\0" }],
    ["stdin a number", { shell: "x", stdin: 5 }],
    ["stdin an array", { shell: "x", stdin: [1, 2] }],
    ["timeout 0", { shell: "x", timeoutMs: 0 }],
    ["negative timeout", { shell: "x", timeoutMs: -1 }],
    ["fractional timeout", { shell: "x", timeoutMs: 1.5 }],
    ["boolean timeout", { shell: "x", timeoutMs: true }],
    ["string timeout", { shell: "x", timeoutMs: "5" }],
    ["NaN timeout", { shell: "x", timeoutMs: NaN }],
    ["unsafe integer", { shell: "x", timeoutMs: 2 ** 64 }],
    ["negative max output", { shell: "x", maxOutputBytes: -1 }],
    ["negative retries", { shell: "x", retries: -1 }],
    ["string retries", { shell: "x", retries: "1" }],
    ["memory 0", { shell: "x", memoryBytes: 0 }],
    ["pids 0", { shell: "x", pids: 0 }],
    ["cpu time 0", { shell: "x", cpuTimeMs: 0 }],
    ["bad template", { shell: "x", template: "a b" }],
    ["template too long", { shell: "x", template: "t".repeat(65) }],
    ["misspelled field", { shell: "x", timeout_ms: 5 }],
    ["unknown field", { shell: "x", foo: 1 }],
  ];
  for (const [name, fields] of BAD) {
    test(`obviously bad job: ${name}`, () => {
      assert.throws(
        () => buildJobMap({ id: "j", ...(fields as object) } as Job & { id: string }),
        InvalidArgumentError,
      );
    });
  }

  for (const id of ["", "a b", "a/b", "x".repeat(129), "é", "a\n", 5, null, undefined]) {
    test(`bad job id ${JSON.stringify(id)}`, () => {
      assert.equal(validJobId(id), false);
      assert.throws(() => buildJobMap({ id, shell: "true" } as unknown as Job & { id: string }), InvalidArgumentError);
    });
  }

  for (const id of ["a", "x".repeat(128), "A-Z_a.z:0-9", "0123456789abcdef".repeat(2)]) {
    test(`good job id ${id.slice(0, 20)}`, () => {
      assert.ok(validJobId(id));
      assert.equal(buildJobMap({ id, shell: "true" }).id, id);
    });
  }

  test("a job encodes and decodes back", () => {
    const job = {
      id: "rt",
      code: "print(1)",
      runtime: "python" as const,
      env: { A: "1" },
      cwd: "/work/x",
      stdin: Buffer.from([0, 1, 2]),
      timeoutMs: 70000,
      maxOutputBytes: 300,
      retries: 2,
      template: "python",
      memoryBytes: 5 << 30,
      pids: 4,
      cpuTimeMs: 1,
    };
    const back = decodeJob(encodeJob(buildJobMap(job)));
    assert.deepEqual({ ...back, stdin: Buffer.from(back.stdin as Uint8Array) }, job);
  });
});

describe("decodeJob checks like a daemon", () => {
  test("v 2 is the same job map as v 1 (PROTOCOL.md section 3)", () => {
    assert.deepEqual(decodeJob(pack({ v: 2, id: "x", shell: "true" })), { id: "x", shell: "true" });
  });

  test("the largest single argument and NAME=value pass", () => {
    const argv = ["echo", "a".repeat(131071)];
    assert.deepEqual(decodeJob(pack({ v: 1, id: "x", argv })).argv, argv);
    const env = { AB: "v".repeat(131068) }; // "AB=" + value: 131071 bytes
    assert.deepEqual(decodeJob(pack({ v: 1, id: "x", shell: "true", env })).env, env);
  });

  const cases: [string, unknown, string][] = [
    ["no v", { id: "x", shell: "true" }, "bad_version"],
    ["v 0", { v: 0, id: "x", shell: "true" }, "bad_version"],
    ["v a string", { v: "1", id: "x", shell: "true" }, "bad_version"],
    ["argv a string", { v: 1, id: "x", argv: "echo" }, "bad_field"],
    ["argv empty", { v: 1, id: "x", argv: [] }, "bad_field"],
    ["both", { v: 1, id: "x", argv: ["true"], shell: "true" }, "bad_field"],
    ["neither", { v: 1, id: "x" }, "bad_field"],
    ["no id", { v: 1, shell: "true" }, "bad_field"],
    ["bad id", { v: 1, id: "a b", shell: "true" }, "bad_field"],
    ["negative timeout", { v: 1, id: "x", shell: "true", timeout_ms: -1 }, "bad_field"],
    ["zero timeout", { v: 1, id: "x", shell: "true", timeout_ms: 0 }, "bad_field"],
    ["env value an int", { v: 1, id: "x", shell: "true", env: { A: 1 } }, "bad_field"],
    ["env name", { v: 1, id: "x", shell: "true", env: { "1A": "x" } }, "bad_field"],
    ["shell NUL", { v: 1, id: "x", shell: "tr\0ue" }, "bad_field"],
    ["shell as bin", { v: 1, id: "x", shell: Buffer.from("true") }, "bad_field"],
    ["relative cwd", { v: 1, id: "x", shell: "true", cwd: "work" }, "bad_field"],
    ["retries 6", { v: 1, id: "x", shell: "true", retries: 6 }, "bad_field"],
    ["stdin an int", { v: 1, id: "x", shell: "true", stdin: 3 }, "bad_field"],
    ["argv 4097", { v: 1, id: "x", argv: Array(4097).fill("true") }, "too_large"],
    ["shell 1 MiB + 1", { v: 1, id: "x", shell: "#".repeat((1 << 20) + 1) }, "too_large"],
    ["stdin 16 MiB + 1", { v: 1, id: "x", shell: "true", stdin: Buffer.alloc((16 << 20) + 1) }, "too_large"],
    ["v 4", { v: 4, id: "x", shell: "true" }, "bad_version"],
    ["memory_bytes 0", { v: 1, id: "x", shell: "true", memory_bytes: 0 }, "bad_field"],
    ["pids 0", { v: 1, id: "x", shell: "true", pids: 0 }, "bad_field"],
    ["cpu_time_ms 0", { v: 1, id: "x", shell: "true", cpu_time_ms: 0 }, "bad_field"],
    ["one argument of 131072 bytes", { v: 1, id: "x", argv: ["echo", "a".repeat(131072)] }, "too_large"],
    ["one NAME=value of 131072 bytes", { v: 1, id: "x", shell: "true", env: { AB: "v".repeat(131069) } }, "too_large"],
  ];
  for (const [name, m, code] of cases) {
    test(`${name} is ${code}`, () => {
      assert.throws(
        () => decodeJob(pack(m)),
        (e: unknown) => e instanceof JobDecodeError && e.code === code,
      );
    });
  }

  test("trailing bytes are bad_payload", () => {
    assert.throws(
      () => decodeJob(Buffer.concat([VECTOR_T1, Buffer.from([0])])),
      (e: unknown) => e instanceof JobDecodeError && e.code === "bad_payload",
    );
  });

  test("env with 1025 entries is too_large", () => {
    const env: Record<string, string> = {};
    for (let i = 0; i < 1025; i++) env[`E${i}`] = "";
    assert.throws(
      () => decodeJob(pack({ v: 1, id: "x", shell: "true", env })),
      (e: unknown) => e instanceof JobDecodeError && e.code === "too_large",
    );
  });
});

// ------------------------------------------------------------------------------------------

function fullResultMap(override: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    v: 1,
    id: "r1",
    outcome: "exit",
    exit_code: 0,
    signal: null,
    timed_out: false,
    killed: false,
    stdout: Buffer.from("out\xff", "latin1"),
    stderr: Buffer.from("err"),
    stdout_truncated: true,
    stderr_truncated: false,
    stdout_dropped_bytes: 12,
    stderr_dropped_bytes: 0,
    exec_time_us: 1500,
    cpu_time_us: 900,
    peak_memory_bytes: 1 << 20,
    queue_wait_us: 42,
    worker: "w1",
    attempt: 1,
    error: null,
    ...override,
  };
}

describe("result map", () => {
  test("a full result decodes", () => {
    const r = decodeResult(pack(fullResultMap()));
    assert.ok(r instanceof Result);
    assert.deepEqual({ ...r }, {
      v: 1,
      id: "r1",
      outcome: "exit",
      exitCode: 0,
      signal: null,
      timedOut: false,
      killed: false,
      stdout: Buffer.from("out\xff", "latin1"),
      stderr: Buffer.from("err"),
      stdoutTruncated: true,
      stderrTruncated: false,
      stdoutDroppedBytes: 12,
      stderrDroppedBytes: 0,
      execTimeUs: 1500,
      cpuTimeUs: 900,
      peakMemoryBytes: 1 << 20,
      queueWaitUs: 42,
      worker: "w1",
      attempt: 1,
      error: null,
    });
    assert.ok(r.ok);
    assert.equal(r.stderrText, "err");
    assert.equal(r.stdoutText, "out\ufffd");
  });

  test("every field of section 5 is on Result", () => {
    const camel = (s: string) => s.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
    const r = decodeResult(pack(fullResultMap()));
    assert.deepEqual(new Set(Object.keys(r)), new Set(Object.keys(fullResultMap()).map(camel)));
  });

  test("str is accepted where bytes are expected", () => {
    const r = decodeResult(pack(fullResultMap({ stdout: "héllo", stderr: "" })));
    assert.deepEqual(r.stdout, Buffer.from("héllo"));
    assert.deepEqual(r.stderr, Buffer.alloc(0));
  });

  test("a str holding invalid UTF-8 keeps its bytes", () => {
    const raw = pack(fullResultMap({ stdout: "X" }));
    const patched = Buffer.from(raw.toString("hex").replace("a67374646f7574a158", "a67374646f7574a2fffe"), "hex");
    assert.deepEqual(decodeResult(patched).stdout, Buffer.from([0xff, 0xfe]));
  });

  test("bin is accepted where strings are expected", () => {
    const r = decodeResult(pack(fullResultMap({ outcome: Buffer.from("timeout"), worker: Buffer.from("w9") })));
    assert.equal(r.outcome, "timeout");
    assert.equal(r.worker, "w9");
  });

  test("unknown fields are ignored, whatever their keys", () => {
    const known = pack(fullResultMap({ future_field: { a: [1, 2] }, another: 7, constructor: 1 }));
    assert.equal(decodeResult(known).worker, "w1");
    // a map key that is an integer, and one that is nil: {1: "x", nil: "y", ...}
    const body = pack(fullResultMap());
    const withOdd = Buffer.concat([
      Buffer.from([0xde, 0x00, 20 + 2]),
      body.subarray(3),
      Buffer.from([0x01, 0xa1, 0x78, 0xc0, 0xa1, 0x79]),
    ]);
    assert.equal(body[0], 0xde); // map16 of 20 entries
    const r = decodeResult(withOdd);
    assert.equal(r.outcome, "exit");
    assert.equal(r.attempt, 1);
  });

  test("an error result", () => {
    const m = fullResultMap({
      outcome: "error",
      exit_code: null,
      error: { code: "bad_field", message: "shell: not a string", retryable: false, extra: 1 },
    });
    const r = decodeResult(pack(m));
    assert.deepEqual(r.error, { code: "bad_field", message: "shell: not a string", retryable: false });
    assert.equal(r.exitCode, null);
    assert.equal(r.ok, false);
  });

  const OK_CASES: [Record<string, unknown>, boolean][] = [
    [{ outcome: "exit", exit_code: 0 }, true],
    [{ outcome: "exit", exit_code: 3 }, false],
    [{ outcome: "signal", exit_code: null, signal: 9 }, false],
    [{ outcome: "timeout", exit_code: null, timed_out: true, killed: true }, false],
    [{ outcome: "error", exit_code: 0 }, false],
  ];
  for (const [override, ok] of OK_CASES) {
    test(`ok is ${ok} for ${JSON.stringify(override)}`, () => {
      assert.equal(decodeResult(pack(fullResultMap(override))).ok, ok);
    });
  }

  test("a minimal result takes the zero values", () => {
    const r = decodeResult(pack({ v: 1, id: "x", outcome: "cancelled", error: { code: "cancelled" } }));
    assert.equal(r.outcome, "cancelled");
    assert.deepEqual(r.stdout, Buffer.alloc(0));
    assert.equal(r.exitCode, null);
    assert.deepEqual(r.error, { code: "cancelled", message: "", retryable: false });
    assert.equal(r.attempt, 0);
  });

  const BAD_RESULTS: [string, Buffer][] = [
    ["c1", Buffer.from([0xc1])],
    ["empty", Buffer.alloc(0)],
    ["array", pack([1, 2, 3])],
    ["no outcome", pack({ v: 1, id: "x" })],
    ["exit code a string", pack(fullResultMap({ exit_code: "0" }))],
    ["stdout an int", pack(fullResultMap({ stdout: 5 }))],
    ["error a string", pack(fullResultMap({ error: "oops" }))],
    ["trailing bytes", Buffer.concat([pack(fullResultMap()), Buffer.from([0])])],
  ];
  for (const [name, raw] of BAD_RESULTS) {
    test(`bad result: ${name}`, () => {
      assert.throws(() => decodeResult(raw), ProtocolError);
    });
  }
});

describe("events", () => {
  test("output and exited events", () => {
    const ev = decodeEvent(pack({ v: 1, type: "stderr", seq: 4, data: Buffer.from([0, 0x78]) }));
    assert.ok(ev instanceof OutputEvent);
    assert.deepEqual([ev.type, ev.seq, ev.data], ["stderr", 4, Buffer.from([0, 0x78])]);
    assert.equal(ev.text, "\0x");
    const ex = decodeEvent(pack({ v: 1, type: "exited", seq: 9, result: fullResultMap({ outcome: "timeout" }) }));
    assert.ok(ex instanceof ExitedEvent);
    assert.equal(ex.seq, 9);
    assert.equal(ex.result.outcome, "timeout");
    assert.deepEqual(ex.result.stdout, Buffer.from("out\xff", "latin1"));
  });

  test("str data is accepted", () => {
    const ev = decodeEvent(pack({ v: 1, type: "stdout", seq: 1, data: "hi" }));
    assert.ok(ev instanceof OutputEvent);
    assert.deepEqual(ev.data, Buffer.from("hi"));
  });

  test("unknown event types and fields decode", () => {
    const ev = decodeEvent(pack({ v: 1, type: "progress", seq: 2, pct: 50 }));
    assert.ok(ev instanceof UnknownEvent);
    assert.deepEqual([ev.type, ev.seq], ["progress", 2]);
    const st = decodeEvent(pack({ v: 1, type: "started", seq: 0, worker: "w", attempt: 1, extra: [1] }));
    assert.ok(st instanceof StartedEvent);
  });

  const BAD_EVENTS: [string, unknown][] = [
    ["no type", { v: 1, seq: 0 }],
    ["no seq", { v: 1, type: "stdout" }],
    ["exited without result", { v: 1, type: "exited", seq: 1 }],
    ["an array", [1]],
  ];
  for (const [name, obj] of BAD_EVENTS) {
    test(`bad event: ${name}`, () => {
      assert.throws(() => decodeEvent(pack(obj)), ProtocolError);
    });
  }
});
