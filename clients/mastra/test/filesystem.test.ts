/**
 * SandpoolFilesystem against a real sandpoold with the real @mastra/core: every filesystem
 * method, Mastra's error classes for sandpool's error codes, and the same files seen by the
 * agent's file tools and its commands.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  DirectoryNotEmptyError,
  DirectoryNotFoundError,
  FileExistsError,
  FileNotFoundError,
  IsDirectoryError,
  NotDirectoryError,
  PermissionError,
  StaleFileError,
  Workspace,
  WorkspaceReadOnlyError,
} from "@mastra/core/workspace";
import { Client } from "sandpool";
import type { Deployment } from "sandpool/testing";

import { SandpoolFilesystem, SandpoolSandbox } from "../src/index.js";
import { destroyAll, sessionId, startDeployment, waitFor } from "./support/env.js";

let dep: Deployment;
let admin: Client;
let sandbox: SandpoolSandbox;
let fs: SandpoolFilesystem;

before(async () => {
  dep = await startDeployment();
  admin = new Client({ url: dep.url });
  sandbox = new SandpoolSandbox({ id: sessionId("fs"), redisUrl: dep.url });
  fs = new SandpoolFilesystem({ sandbox });
});

after(async () => {
  await sandbox?.close();
  if (admin) await destroyAll(admin);
  await dep?.stop();
});

/**
 * Wait until a file written in the session now gets an mtime later than `t` (Mastra compares
 * mtimes in milliseconds, and the kernel stamps files a tick at a time): a change made after
 * this can be told from one made at `t`.
 */
async function clockPast(t: Date): Promise<void> {
  await waitFor(
    async () => {
      await fs.writeFile(".clock-probe", "");
      return (await fs.stat(".clock-probe")).modifiedAt.getTime() > t.getTime();
    },
    10000,
    "a file mtime past the one compared with",
  );
}

describe("files", () => {
  test("the first operation starts the sandbox; identity", async () => {
    assert.equal(sandbox.status, "pending");
    assert.equal(await fs.exists("nothing-yet"), false);
    assert.equal(sandbox.status, "running");
    assert.equal(fs.provider, "sandpool");
    assert.equal(fs.root, "/work");
    assert.equal(fs.getInfo().metadata?.sessionId, sandbox.id);
    assert.match(fs.getInstructions(), /same files its commands see/);
  });

  test("writeFile and readFile: text, bytes, encodings; relative paths are under /work", async () => {
    await fs.writeFile("notes/hello.txt", "hello\n");
    assert.equal(await fs.readFile("notes/hello.txt", { encoding: "utf-8" }), "hello\n");
    assert.deepEqual(await fs.readFile("/work/notes/hello.txt"), Buffer.from("hello\n"));
    const bytes = Buffer.from([0, 1, 2, 250, 255]);
    await fs.writeFile("/tmp/bin.dat", bytes);
    assert.deepEqual(await fs.readFile("/tmp/bin.dat"), bytes);
    assert.equal(await fs.readFile("/tmp/bin.dat", { encoding: "base64" }), bytes.toString("base64"));
    await fs.writeFile("/work/u8", new Uint8Array([65, 66]));
    assert.equal(await fs.readFile("/work/u8", { encoding: "utf8" }), "AB");
  });

  test("commands and file tools see the same files, both ways", async () => {
    await fs.writeFile("from-fs.txt", "written by the filesystem\n");
    const r = await sandbox.executeCommand!("cat from-fs.txt && echo 'written by a command' > from-cmd.txt");
    assert.equal(r.stdout, "written by the filesystem\n");
    assert.equal(await fs.readFile("from-cmd.txt", { encoding: "utf-8" }), "written by a command\n");
  });

  test("appendFile creates, then appends", async () => {
    await fs.appendFile("log/app.log", "one\n");
    await fs.appendFile("log/app.log", Buffer.from("two\n"));
    assert.equal(await fs.readFile("log/app.log", { encoding: "utf-8" }), "one\ntwo\n");
  });

  test("exists and stat", async () => {
    await fs.writeFile("st/data.json", '{"a":1}');
    assert.equal(await fs.exists("st/data.json"), true);
    assert.equal(await fs.exists("st"), true);
    assert.equal(await fs.exists("st/nope"), false);
    const st = await fs.stat("st/data.json");
    assert.equal(st.type, "file");
    assert.equal(st.name, "data.json");
    assert.equal(st.path, "/work/st/data.json");
    assert.equal(st.size, 7);
    assert.equal(st.mimeType, "application/json");
    assert.ok(Math.abs(st.modifiedAt.getTime() - Date.now()) < 120_000);
    const dir = await fs.stat("st");
    assert.equal(dir.type, "directory");
    assert.equal(dir.mimeType, undefined);
    await assert.rejects(fs.stat("st/nope"), FileNotFoundError);
  });

  test("readdir: entries, recursive, extension filter, depth, links", async () => {
    await fs.writeFile("rd/a.ts", "a");
    await fs.writeFile("rd/b.md", "bb");
    await fs.writeFile("rd/sub/c.ts", "ccc");
    await fs.writeFile("rd/sub/deep/d.ts", "dddd");
    await sandbox.executeCommand!("ln -s sub rd/link");
    const flat = await fs.readdir("rd");
    assert.deepEqual(
      flat.map((e) => [e.name, e.type]).sort(),
      [
        ["a.ts", "file"],
        ["b.md", "file"],
        ["link", "directory"],
        ["sub", "directory"],
      ],
    );
    const link = flat.find((e) => e.name === "link");
    assert.deepEqual([link?.isSymlink, link?.symlinkTarget], [true, "sub"]);
    assert.equal(flat.find((e) => e.name === "b.md")?.size, 2);
    const ts = await fs.readdir("rd", { recursive: true, extension: ".ts" });
    assert.deepEqual(
      ts.filter((e) => e.type === "file").map((e) => e.name).sort(),
      ["a.ts", "sub/c.ts", "sub/deep/d.ts"],
    );
    const shallow = await fs.readdir("rd", { recursive: true, maxDepth: 0 });
    assert.ok(!shallow.some((e) => e.name.includes("/")), "maxDepth 0: the directory itself only");
    const walked = await fs.walk("rd");
    assert.ok(walked.some((e) => e.path === "sub/deep/d.ts" && e.type === "file"));
    await assert.rejects(fs.readdir("rd/a.ts"), NotDirectoryError);
    await assert.rejects(fs.readdir("no-such-dir"), DirectoryNotFoundError);
  });

  test("mkdir: recursive, existing directory fine, a file in the way", async () => {
    await fs.mkdir("mk/a/b");
    await fs.mkdir("mk/a/b");
    assert.equal((await fs.stat("mk/a/b")).type, "directory");
    await assert.rejects(fs.mkdir("mk2/x/y", { recursive: false }), DirectoryNotFoundError);
    await fs.writeFile("mk/file", "x");
    await assert.rejects(fs.mkdir("mk/file"), FileExistsError);
  });

  test("rmdir: empty, non-empty, recursive, missing, force, not a directory", async () => {
    await fs.mkdir("rm/empty");
    await fs.rmdir("rm/empty");
    assert.equal(await fs.exists("rm/empty"), false);
    await fs.writeFile("rm/full/f", "x");
    await assert.rejects(fs.rmdir("rm/full"), DirectoryNotEmptyError);
    await fs.rmdir("rm/full", { recursive: true });
    assert.equal(await fs.exists("rm/full"), false);
    await assert.rejects(fs.rmdir("rm/missing"), DirectoryNotFoundError);
    await fs.rmdir("rm/missing", { force: true });
    await fs.writeFile("rm/file", "x");
    await assert.rejects(fs.rmdir("rm/file"), NotDirectoryError);
  });

  test("deleteFile: file, missing, force, directory", async () => {
    await fs.writeFile("del/f", "x");
    await fs.deleteFile("del/f");
    assert.equal(await fs.exists("del/f"), false);
    await assert.rejects(fs.deleteFile("del/f"), FileNotFoundError);
    await fs.deleteFile("del/f", { force: true });
    await assert.rejects(fs.deleteFile("del"), IsDirectoryError);
  });

  test("copyFile and moveFile", async () => {
    await fs.writeFile("cp/src.txt", "source");
    await fs.copyFile("cp/src.txt", "cp/new/dir/dst.txt");
    assert.equal(await fs.readFile("cp/new/dir/dst.txt", { encoding: "utf-8" }), "source");
    await fs.writeFile("cp/other.txt", "other");
    await assert.rejects(fs.copyFile("cp/other.txt", "cp/src.txt", { overwrite: false }), FileExistsError);
    await fs.copyFile("cp/other.txt", "cp/src.txt");
    assert.equal(await fs.readFile("cp/src.txt", { encoding: "utf-8" }), "other");
    await assert.rejects(fs.copyFile("cp/new", "cp/new2"), IsDirectoryError);
    await fs.copyFile("cp/new", "cp/new2", { recursive: true });
    assert.equal(await fs.readFile("cp/new2/dir/dst.txt", { encoding: "utf-8" }), "source");
    await assert.rejects(fs.copyFile("cp/missing", "cp/x"), FileNotFoundError);

    await fs.moveFile("cp/other.txt", "mv/moved.txt");
    assert.equal(await fs.exists("cp/other.txt"), false);
    assert.equal(await fs.readFile("mv/moved.txt", { encoding: "utf-8" }), "other");
    await fs.writeFile("mv/b.txt", "b");
    await assert.rejects(fs.moveFile("mv/b.txt", "mv/moved.txt", { overwrite: false }), FileExistsError);
    await fs.moveFile("mv/b.txt", "mv/moved.txt");
    assert.equal(await fs.readFile("mv/moved.txt", { encoding: "utf-8" }), "b");
    await assert.rejects(fs.moveFile("mv/missing", "mv/x"), FileNotFoundError);
  });

  test("writeFile options: overwrite false, recursive false, expectedMtime", async () => {
    await fs.writeFile("wo/a.txt", "1");
    await assert.rejects(fs.writeFile("wo/a.txt", "2", { overwrite: false }), FileExistsError);
    await assert.rejects(fs.writeFile("wo/missing/a.txt", "x", { recursive: false }), DirectoryNotFoundError);
    const st = await fs.stat("wo/a.txt");
    // Mastra's expectedMtime has millisecond precision (and file times a kernel tick): a change
    // within the same tick cannot be told from none, here as with Mastra's LocalFilesystem.
    await clockPast(st.modifiedAt);
    await fs.writeFile("wo/a.txt", "3", { expectedMtime: st.modifiedAt });
    assert.equal(await fs.readFile("wo/a.txt", { encoding: "utf-8" }), "3");
    await assert.rejects(fs.writeFile("wo/a.txt", "4", { expectedMtime: st.modifiedAt }), StaleFileError);
    // Changed by a command behind the tool's back: stale too.
    const st2 = await fs.stat("wo/a.txt");
    await clockPast(st2.modifiedAt);
    await sandbox.executeCommand!("echo changed > wo/a.txt");
    await assert.rejects(fs.writeFile("wo/a.txt", "5", { expectedMtime: st2.modifiedAt }), StaleFileError);
  });

  test("readFile errors; permission", async () => {
    await assert.rejects(fs.readFile("no/such/file"), FileNotFoundError);
    await fs.mkdir("rdir");
    await assert.rejects(fs.readFile("rdir"), IsDirectoryError);
    await assert.rejects(fs.writeFile("/etc/mastra-test", "x"), PermissionError);
    const rootFs = new SandpoolFilesystem({ sandbox, asRoot: true });
    await rootFs.writeFile("/etc/mastra-test", "as root\n");
    assert.equal(await fs.readFile("/etc/mastra-test", { encoding: "utf-8" }), "as root\n");
  });

  test("readOnly refuses every change", async () => {
    const ro = new SandpoolFilesystem({ sandbox, readOnly: true });
    await assert.rejects(ro.writeFile("ro.txt", "x"), WorkspaceReadOnlyError);
    await assert.rejects(ro.appendFile("ro.txt", "x"), WorkspaceReadOnlyError);
    await assert.rejects(ro.deleteFile("from-fs.txt"), WorkspaceReadOnlyError);
    await assert.rejects(ro.mkdir("rodir"), WorkspaceReadOnlyError);
    await assert.rejects(ro.rmdir("st"), WorkspaceReadOnlyError);
    await assert.rejects(ro.copyFile("from-fs.txt", "x"), WorkspaceReadOnlyError);
    await assert.rejects(ro.moveFile("from-fs.txt", "x"), WorkspaceReadOnlyError);
    assert.equal(await ro.readFile("from-fs.txt", { encoding: "utf-8" }), "written by the filesystem\n");
  });

  test("a workspace of both: the file tools' filesystem and the command sandbox share files", async () => {
    const ws = new Workspace({ sandbox, filesystem: fs });
    await ws.filesystem!.writeFile("ws.txt", "via workspace\n");
    const r = await ws.sandbox!.executeCommand!("cat ws.txt");
    assert.equal(r.stdout, "via workspace\n");
  });
});
