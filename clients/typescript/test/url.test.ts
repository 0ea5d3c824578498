/** Redis URL parsing: the same table of cases as the Python client's test_url.py. */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Client, InvalidArgumentError, parseRedisUrl, RedisAddress } from "../src/index.js";

const A = (f: ConstructorParameters<typeof RedisAddress>[0]) => ({ ...new RedisAddress(f) });

const VALID: [string, ReturnType<typeof A>][] = [
  ["redis://127.0.0.1:6379", A({ host: "127.0.0.1", port: 6379 })],
  ["redis://localhost", A({ host: "localhost", port: 6379 })],
  ["redis://h:7000/3", A({ host: "h", port: 7000, db: 3 })],
  ["redis://h:7000/", A({ host: "h", port: 7000 })],
  ["redis://:s3cret@h:7000", A({ host: "h", port: 7000, password: "s3cret" })],
  ["redis://alice:pw@h:1/2", A({ host: "h", port: 1, user: "alice", password: "pw", db: 2 })],
  ["redis://alice:p%40ss%3Aw@h:1", A({ host: "h", port: 1, user: "alice", password: "p@ss:w" })],
  ["redis://alice:a:b@h:1", A({ host: "h", port: 1, user: "alice", password: "a:b" })],
  ["REDIS://H:5", A({ host: "h", port: 5 })],
  ["redis://[::1]:6380", A({ host: "::1", port: 6380 })],
  ["unix:///run/redis.sock", A({ unixPath: "/run/redis.sock" })],
  ["unix:///run/redis.sock?db=4", A({ unixPath: "/run/redis.sock", db: 4 })],
  ["unix:///run/r.sock?password=pw", A({ unixPath: "/run/r.sock", password: "pw" })],
  [
    "unix:///run/r.sock?db=1&user=u&password=p%26w",
    A({ unixPath: "/run/r.sock", user: "u", password: "p&w", db: 1 }),
  ],
  ["redis://secret@h:1", A({ host: "h", port: 1, password: "secret" })],
  ["redis://u:@h:1", A({ host: "h", port: 1, user: "u" })], // empty password: no AUTH
  ["redis://a:b@c@h:1", A({ host: "h", port: 1, user: "a", password: "b@c" })],
];

const INVALID = [
  "",
  "127.0.0.1:6379",
  "http://h:1",
  "rediss://h:1",
  "redis://",
  "redis://h:notaport",
  "redis://h:70000",
  "redis://h:0",
  "redis://h:1/x",
  "redis://h:1/-1",
  "redis://h:1/1/2",
  "redis://h:1?db=2",
  "unix://:pw@/run/r.sock",
  "unix:///s.sock?passwd=x",
  "unix://",
  "unix://host/path.sock",
  "unix://relative.sock",
  "unix:///",
  "unix:///s.sock?db=x",
  "unix:///s.sock?db=1&db=2",
  "unix:///s.sock?timeout=1",
  "redis://h:1#frag",
];

describe("parseRedisUrl", () => {
  for (const [url, expected] of VALID) {
    test(`valid ${url}`, () => {
      assert.deepEqual({ ...parseRedisUrl(url) }, expected);
    });
  }
  for (const url of INVALID) {
    test(`invalid ${JSON.stringify(url)}`, () => {
      assert.throws(() => parseRedisUrl(url), InvalidArgumentError);
    });
  }

  test("errors never show the password", () => {
    for (const url of [
      "redis://u:topsecret@h:notaport",
      "redis://u:topsecret@h:1/zz",
      "unix:///s.sock?password=topsecret&db=zz",
      "redis://topsecret@h:x",
    ]) {
      assert.throws(
        () => parseRedisUrl(url),
        (e: unknown) => e instanceof InvalidArgumentError && !e.message.includes("topsecret"),
      );
    }
  });

  test("redacted", () => {
    assert.equal(parseRedisUrl("redis://alice:topsecret@h:7/1").redacted(), "redis://alice:***@h:7/1");
    assert.ok(!String(new Client("redis://alice:topsecret@h:7/1")).includes("topsecret"));
    assert.equal(parseRedisUrl("unix:///s.sock?db=2").redacted(), "unix:///s.sock?db=2");
    assert.equal(
      parseRedisUrl("unix:///s.sock?user=u&password=topsecret").redacted(),
      "unix:///s.sock?user=u&password=***",
    );
  });

  test("URL from the argument, the environment, and the default", () => {
    const saved = process.env.SANDPOOL_REDIS_URL;
    try {
      delete process.env.SANDPOOL_REDIS_URL;
      assert.deepEqual({ ...new Client().address }, A({ host: "127.0.0.1", port: 6379 }));
      process.env.SANDPOOL_REDIS_URL = "unix:///tmp/x.sock?db=5";
      assert.deepEqual({ ...new Client().address }, A({ unixPath: "/tmp/x.sock", db: 5 }));
      assert.deepEqual({ ...new Client({ prefix: "p" }).address }, A({ unixPath: "/tmp/x.sock", db: 5 }));
      assert.deepEqual({ ...new Client("redis://h:9").address }, A({ host: "h", port: 9 }));
      assert.deepEqual({ ...new Client({ url: "redis://h:8" }).address }, A({ host: "h", port: 8 }));
    } finally {
      if (saved === undefined) delete process.env.SANDPOOL_REDIS_URL;
      else process.env.SANDPOOL_REDIS_URL = saved;
    }
  });

  test("client options are checked", () => {
    assert.throws(() => new Client({ url: "redis://h", prefix: "" }), InvalidArgumentError);
    assert.throws(() => new Client({ url: "redis://h", queue: "" }), InvalidArgumentError);
    assert.throws(() => new Client({ url: "redis://h", pollIntervalMs: 0 }), InvalidArgumentError);
    assert.throws(() => new Client({ url: "redis://h", retryWindowMs: -1 }), InvalidArgumentError);
    const c = new Client("redis://h", { prefix: "p", queue: "q" });
    assert.equal(c.keys.queue(c.queue), "p:q:q");
    assert.equal(c.keys.out("j"), "p:out:j");
  });
});
