/**
 * Protocol v2 codecs (PROTOCOL.md sections 12-19) and the checks made before anything is sent:
 * request maps byte for byte, operation results of both shapes, process events, records, error
 * classes, key names. No daemon.
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { decode as msgpackDecode, encode as msgpackEncode } from "@msgpack/msgpack";

import {
  Client,
  ConflictError,
  decodeAnyResult,
  decodeOpEvent,
  RESULT_STORED,
  decodeProcessEvent,
  decodeSessionRecord,
  decodeStoredResult,
  encodeRequest,
  encodeWireValue,
  ExistsError,
  Float64,
  InvalidArgumentError,
  IsADirectoryError,
  Keys,
  NotEmptyError,
  NotFoundError,
  OpResult,
  PermissionError,
  ProcessExitedEvent,
  ProcessOutputEvent,
  Result,
  SessionError,
  sessionError,
  SessionInfo,
  SessionLostError,
  SessionNotFoundError,
  SessionStoppedError,
  UnknownProcessEvent,
  UnsupportedError,
} from "../src/index.js";
import {
  decodeListResult,
  decodeReadResult,
  decodeStatResult,
  decodeWrittenFiles,
  unpackV2Map,
} from "../src/session_protocol.js";
import { hex } from "./support/vectors.js";

function pack(v: unknown): Buffer {
  const u = msgpackEncode(v, { useBigInt64: true });
  return Buffer.from(u.buffer, u.byteOffset, u.byteLength);
}

describe("request maps (section 13)", () => {
  test("{v:2, id, op, session} with keys in that order, byte for byte", () => {
    // {"v":2,"id":"o1","op":"info","session":"s1"}
    const want = hex("84 a1 76 02 a2 69 64 a2 6f 31 a2 6f 70 a4 69 6e 66 6f a7 73 65 73 73 69 6f 6e a2 73 31");
    assert.deepEqual(encodeRequest("o1", "info", "s1"), want);
  });

  test("fields follow in the order given; undefined ones are left out", () => {
    const raw = encodeRequest("o", "read", "s", { path: "/work/a", offset: undefined, length: 3, as_root: true });
    const back = msgpackDecode(raw) as Record<string, unknown>;
    assert.deepEqual(Object.keys(back), ["v", "id", "op", "session", "path", "length", "as_root"]);
    assert.deepEqual(back, { v: 2, id: "o", op: "read", session: "s", path: "/work/a", length: 3, as_root: true });
  });

  test("bytes are msgpack bin, strings str", () => {
    const raw = encodeWireValue({ data: Buffer.from("hi"), path: "hi" });
    assert.deepEqual(raw, hex("82 a4 64 61 74 61 c4 02 68 69 a4 70 61 74 68 a2 68 69"));
  });

  test("Float64 is a float 64 even when integral (limits.cpus)", () => {
    assert.deepEqual(encodeWireValue(new Float64(1)), hex("cb 3f f0 00 00 00 00 00 00"));
    assert.deepEqual(encodeWireValue(new Float64(0.5)), hex("cb 3f e0 00 00 00 00 00 00"));
  });

  test("integers take their smallest form; 2^32 and above stay integers; bigints are uint64", () => {
    assert.deepEqual(encodeWireValue(5), hex("05"));
    assert.deepEqual(encodeWireValue(5000), hex("cd 13 88"));
    assert.deepEqual(encodeWireValue(2 ** 32), hex("cf 00 00 00 01 00 00 00 00"));
    assert.deepEqual(encodeWireValue(1700000000123456789n), hex("cf 17 97 9c fe 3d 85 cd 15"));
    assert.deepEqual(encodeWireValue(-1), hex("ff"));
  });

  test("nested arrays of maps (write's files)", () => {
    const raw = encodeRequest("o", "write", "s", {
      files: [{ path: "/a", data: Buffer.from("x"), mode: 0o600, expected_mtime_ns: 5n, parents: undefined }],
    });
    const back = msgpackDecode(raw, { useBigInt64: true }) as { files: Record<string, unknown>[] };
    assert.deepEqual(Object.keys(back.files[0] ?? {}), ["path", "data", "mode", "expected_mtime_ns"]);
    assert.equal(back.files[0]?.mode, 0o600);
    assert.equal(back.files[0]?.expected_mtime_ns, 5n);
  });

  test("maps given as Map keep their order", () => {
    const raw = encodeWireValue(new Map([["b", "1"], ["a", "2"]]));
    assert.deepEqual(Object.keys(msgpackDecode(raw) as object), ["b", "a"]);
  });
});

describe("results of operations", () => {
  const opResult = {
    v: 2,
    id: "o1",
    op: "write",
    session: "s1",
    ok: true,
    error: null,
    value: { files: [{ path: "/work/a", size: 3, mtime_ns: 1700000000123456789n }] },
  };

  test("an operation result map; uint64 nanoseconds stay exact", () => {
    const r = decodeStoredResult(pack(opResult));
    assert.ok(r instanceof OpResult);
    assert.deepEqual([r.v, r.id, r.op, r.session, r.ok, r.error], [2, "o1", "write", "s1", true, null]);
    const files = decodeWrittenFiles(r.value ?? {});
    assert.deepEqual(files, [{ path: "/work/a", size: 3, mtimeNs: 1700000000123456789n }]);
  });

  test("a failed operation carries its error", () => {
    const r = decodeStoredResult(
      pack({ ...opResult, ok: false, value: null, error: { code: "not_found", message: "no /x", retryable: false } }),
    );
    assert.ok(r instanceof OpResult);
    assert.deepEqual(r.error, { code: "not_found", message: "no /x", retryable: false });
  });

  test("ok false without an error map still fails", () => {
    const r = decodeStoredResult(pack({ ...opResult, ok: false, value: null, error: null }));
    assert.ok(r instanceof OpResult && r.error !== null && r.error.code === "internal");
  });

  test("a job result map under an op id (exec, or a rejected request) is a Result", () => {
    const r = decodeAnyResult(
      unpackV2Map(pack({ v: 1, id: "o2", outcome: "error", error: { code: "bad_field", message: "x", retryable: false } }), "t"),
    );
    assert.ok(r instanceof Result);
    const asOp = OpResult.fromJobResult(r, "write", "s1");
    assert.deepEqual([asOp.ok, asOp.error?.code, asOp.op], [false, "bad_field", "write"]);
  });

  test("a job Result read from an operation result map is outcome error", () => {
    const r = Result.fromMap({ v: 2, id: "o", ok: false, error: { code: "session_stopped", message: "m", retryable: false } });
    assert.equal(r.outcome, "error");
    assert.equal(r.error?.code, "session_stopped");
  });

  test("str where bytes are expected, unknown fields ignored", () => {
    const r = decodeStoredResult(
      pack({ v: 2, id: "o", op: "read", session: "s", ok: true, value: { data: "text", size: 4, mtime_ns: 7, future: 1 }, new_field: [1] }),
    );
    assert.ok(r instanceof OpResult);
    const read = decodeReadResult(r.value ?? {});
    assert.deepEqual([read.data.toString(), read.size, read.mtimeNs], ["text", 4, 7n]);
  });

  test("list and stat values", () => {
    const list = decodeListResult({
      entries: [
        { path: "/work/d", name: "d", type: "dir", size: 0, mode: 0o755, mtime_ns: 1n, target: null },
        { path: "/work/l", name: "l", type: "link", size: 1, mode: 0o777, mtime_ns: 2, target: "d" },
      ],
      truncated: false,
    });
    assert.deepEqual(
      list.entries.map((e) => [e.name, e.type, e.target, e.mtimeNs]),
      [
        ["d", "dir", null, 1n],
        ["l", "link", "d", 2n],
      ],
    );
    const st = decodeStatResult({ path: "/work/a", type: "file", size: 3, mode: 0o644, mtime_ns: 9n, uid: 1000, gid: 1000 });
    assert.deepEqual([st.type, st.size, st.mtimeNs, st.atimeNs, st.target, st.uid], ["file", 3, 9n, 0n, null, 1000]);
  });
});

describe("events", () => {
  test("the exited event of an operation (section 16)", () => {
    const ev = pack({ v: 2, type: "exited", seq: 0, result: { v: 2, id: "o", op: "stat", session: "s", ok: true, value: {} } });
    const r = decodeOpEvent(ev);
    assert.ok(r instanceof OpResult && r.ok);
    // A result over 64 KiB is named, not carried: the caller reads the result key.
    assert.equal(decodeOpEvent(pack({ v: 2, type: "exited", seq: 0, result_bytes: 1 << 20 })), RESULT_STORED);
  });

  test("other event types are not results; undecodable ones throw", () => {
    assert.equal(decodeOpEvent(pack({ v: 2, type: "progress", seq: 0 })), null);
    assert.throws(() => decodeOpEvent(hex("c1")));
    assert.throws(() => decodeOpEvent(pack({ v: 2, type: "exited", seq: 0 })));
  });

  test("background process events (section 15)", () => {
    const out = decodeProcessEvent(pack({ v: 2, type: "stdout", seq: 3, data: Buffer.from("hi\n") }));
    assert.ok(out instanceof ProcessOutputEvent);
    assert.deepEqual([out.type, out.seq, out.text], ["stdout", 3, "hi\n"]);
    const ex = decodeProcessEvent(pack({ v: 2, type: "exited", seq: 4, exit_code: 0, signal: null }));
    assert.ok(ex instanceof ProcessExitedEvent);
    assert.deepEqual([ex.seq, ex.exitCode, ex.signal], [4, 0, null]);
    const killed = decodeProcessEvent(pack({ v: 2, type: "exited", seq: 1, exit_code: null, signal: 9 }));
    assert.ok(killed instanceof ProcessExitedEvent && killed.signal === 9 && killed.exitCode === null);
    assert.ok(decodeProcessEvent(pack({ v: 2, type: "later", seq: 5 })) instanceof UnknownProcessEvent);
    assert.throws(() => decodeProcessEvent(pack({ v: 2, type: "stdout" })));
  });
});

describe("records and info", () => {
  test("a session record (section 14)", () => {
    const h: Record<string, Buffer> = {
      state: Buffer.from("running"),
      template: Buffer.from("default"),
      consumer: Buffer.from("d1"),
      created_ms: Buffer.from("1700000000000"),
      last_used_ms: Buffer.from("1700000000500"),
      idle_timeout_ms: Buffer.from("1800000"),
      max_lifetime_ms: Buffer.from("0"),
      timeout_at_ms: Buffer.from("1700001800500"),
      ephemeral: Buffer.from("1"),
      labels: pack({ team: "a", run: "7" }),
      options: pack({ env: { A: "1" } }),
    };
    const r = decodeSessionRecord("s1", h);
    assert.ok(r !== null);
    assert.deepEqual(
      [r.id, r.state, r.template, r.consumer, r.createdMs, r.idleTimeoutMs, r.timeoutAtMs, r.ephemeral, r.error],
      ["s1", "running", "default", "d1", 1700000000000, 1800000, 1700001800500, true, null],
    );
    assert.deepEqual(r.labels, { team: "a", run: "7" });
    assert.deepEqual(r.options, { env: { A: "1" } });
    assert.equal(decodeSessionRecord("gone", {}), null);
  });

  test("session info", () => {
    const i = new SessionInfo(
      unpackV2Map(
        pack({
          session: "s1",
          state: "running",
          template: "default",
          created_ms: 1,
          last_used_ms: 2,
          timeout_at_ms: 0,
          labels: { a: "b" },
          ephemeral: false,
          memory_bytes: 1048576,
          memory_limit_bytes: 536870912,
          cpu_time_us: 1234,
          cpus: 1.5,
          disk_bytes: 4096,
          disk_limit_bytes: 1073741824,
          processes: 2,
          host: "d1",
        }),
        "info",
      ),
    );
    assert.deepEqual(
      [i.session, i.state, i.template, i.labels, i.memoryBytes, i.memoryLimitBytes, i.cpus, i.diskLimitBytes, i.processes, i.host],
      ["s1", "running", "default", { a: "b" }, 1048576, 536870912, 1.5, 1073741824, 2, "d1"],
    );
  });
});

describe("errors (section 19)", () => {
  const ctx = { op: "read", sessionId: "s1", opId: "o1" };
  const cases: [string, unknown][] = [
    ["session_not_found", SessionNotFoundError],
    ["session_lost", SessionLostError],
    ["session_stopped", SessionStoppedError],
    ["not_found", NotFoundError],
    ["exists", ExistsError],
    ["is_a_directory", IsADirectoryError],
    ["permission", PermissionError],
    ["conflict", ConflictError],
    ["not_empty", NotEmptyError],
    ["unsupported", UnsupportedError],
  ];
  for (const [code, cls] of cases) {
    test(`${code} is ${(cls as { name: string }).name}`, () => {
      const e = sessionError({ code, message: "m", retryable: false }, ctx);
      assert.ok(e instanceof (cls as typeof SessionError));
      assert.ok(e instanceof SessionError);
      assert.deepEqual([e.code, e.op, e.sessionId, e.opId, e.detail], [code, "read", "s1", "o1", "m"]);
      assert.match(e.message, new RegExp(`read on session s1: ${code}: m`));
    });
  }

  test("other codes are plain SessionErrors", () => {
    const e = sessionError({ code: "bad_field", message: "x", retryable: false }, ctx);
    assert.equal(e.constructor, SessionError);
    assert.equal(sessionError({ code: "something_new", message: "", retryable: true }, ctx).retryable, true);
  });
});

describe("keys (section 12)", () => {
  test("session keys and streams", () => {
    const k = new Keys("sandpool");
    assert.equal(k.session("s1"), "sandpool:session:s1");
    assert.equal(k.sessions, "sandpool:sessions");
    assert.equal(k.sessionRequests("default"), "sandpool:sreq:default");
    assert.equal(k.sessionRequests("default", "d1"), "sandpool:sreq:default:d1");
    assert.equal(k.processOutput("s1", "p2"), "sandpool:pout:s1:p2");
    assert.equal(k.snapshot("n"), "sandpool:snapshot:n");
    assert.equal(k.snapshots, "sandpool:snapshots");
  });

  test("the process output pattern escapes glob characters of the prefix", () => {
    assert.equal(new Keys("sandpool").processOutputPattern("s.1"), "sandpool:pout:s.1:*");
    assert.equal(new Keys("a*b[c]?").processOutputPattern("s"), "a\\*b\\[c\\]\\?:pout:s:*");
  });
});

describe("input checked before anything is sent", () => {
  // A client whose Redis does not exist: every check below must fail before any I/O.
  const client = new Client({ url: "redis://127.0.0.1:1", retryWindowMs: 200 });

  test("session ids", () => {
    assert.throws(() => client.session(""), InvalidArgumentError);
    assert.throws(() => client.session("a b"), InvalidArgumentError);
    assert.throws(() => client.session("x".repeat(129)), InvalidArgumentError);
    assert.equal(client.session("agent:1.a-b_c").id, "agent:1.a-b_c");
  });

  test("commands and options", async () => {
    const s = client.session("s1");
    const bad: [string, () => unknown][] = [
      ["both argv and shell", () => s.execStream({ argv: ["a"], shell: "a" } as never)],
      ["neither", () => s.execStream({} as never)],
      ["code without runtime", () => s.execStream({ code: "1" } as never)],
      ["relative cwd", () => s.execStream({ shell: "pwd" }, { cwd: "work" })],
      ["bad env name", () => s.execStream({ shell: "true" }, { env: { "1A": "x" } })],
      ["zero timeout", () => s.execStream({ shell: "true" }, { timeoutMs: 0 })],
      ["NUL in shell", () => s.execStream({ shell: "a\0b" })],
      ["code runtime bash", () => s.codeStream("1", "bash" as never)],
      ["bad context", () => s.codeStream("1", "python", { context: "a b" })],
    ];
    for (const [name, f] of bad) assert.throws(f, InvalidArgumentError, name);
    const rejects: [string, () => Promise<unknown>][] = [
      ["relative path", () => s.read("a.txt")],
      ["no files", () => s.write([])],
      ["negative mode", () => s.write([{ path: "/a", data: "x", mode: -1 }])],
      ["mtime not a bigint", () => s.write([{ path: "/a", data: "x", expectedMtimeNs: 5 as never }])],
      ["bad snapshot name", () => s.snapshot("a/b")],
      ["bad template", () => s.create({ template: "a b" })],
      ["cpus 0", () => s.create({ limits: { cpus: 0 } })],
      ["memory 0", () => s.create({ limits: { memoryBytes: 0 } })],
      ["labels not strings", () => s.create({ labels: { a: 1 } as never })],
      ["spawn both", () => s.spawn({ argv: ["a"], shell: "b" } as never)],
      ["spawn stdin", () => s.spawn("cat", { stdin: "closed" as never })],
      ["kill signal 0", () => s.killProcess("p1", 0)],
    ];
    for (const [name, f] of rejects) await assert.rejects(f(), InvalidArgumentError, name);
  });

  test("close", async () => {
    await client.close();
  });
});
