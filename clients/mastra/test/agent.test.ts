/**
 * The README's example (examples/agent.ts) run end to end: a Mastra Agent with a Workspace of a
 * SandpoolSandbox and a SandpoolFilesystem, driven by a scripted model (the AI SDK's test
 * model) through real tool calls: write a file, run a command that reads it, start a background
 * server, read its output, kill it. Then two agents whose workspaces must not see each other.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client } from "sandpool";
import type { Deployment } from "sandpool/testing";

import { createSandpoolAgent, EXAMPLE_PROMPT } from "../examples/agent.js";
import { AGENT_STEPS, GREETING, PORT, scriptServerPid } from "./support/agent-script.js";
import { scriptedModel } from "./support/scripted-model.js";
import { destroyAll, sessionId, startDeployment } from "./support/env.js";

let dep: Deployment;
let admin: Client;

before(async () => {
  dep = await startDeployment();
  admin = new Client({ url: dep.url });
});

after(async () => {
  if (admin) await destroyAll(admin);
  await dep?.stop();
});

describe("the README's agent", () => {
  test("writes a file, reads it with a command, serves it in the background, reads the server's output, kills it", async () => {
    const { model, seen } = scriptedModel(AGENT_STEPS);
    const id = sessionId("agent");
    const { agent, sandbox } = createSandpoolAgent({ model, sessionId: id, redisUrl: dep.url });
    try {
      const result = await agent.generate(EXAMPLE_PROMPT, { maxSteps: 12 });
      assert.match(result.text, /server stopped/);

      // What each tool answered, as the model saw it.
      const answers = seen.map((s) => s.lastToolResult ?? "");
      assert.match(answers[1] ?? "", /Wrote 21 bytes to greeting\.txt/);
      assert.equal(answers[2], "HELLO FROM THE AGENT\n");
      assert.match(answers[3] ?? "", /Started background process \(PID: p\d+\)/);
      assert.equal(answers[4], GREETING, "the server served the file the file tool wrote");
      assert.match(answers[5] ?? "", new RegExp(`Serving HTTP on 127\\.0\\.0\\.1 port ${PORT}`));
      assert.match(answers[5] ?? "", /GET \/greeting\.txt HTTP\/1\.1" 200/);
      assert.match(answers[6] ?? "", /killed/i);

      // The session agrees: the file is there, the server was killed.
      const session = admin.session(id);
      assert.equal(await session.readText("/work/greeting.txt"), GREETING);
      const server = (await session.ps()).find((p) => p.pid === scriptServerPid());
      assert.equal(server?.state, "exited");
      assert.match(server?.command ?? "", /http\.server/);
      assert.deepEqual(
        seen[0]?.toolNames.filter((n) => /execute_command|get_process_output|kill_process|write_file/.test(n)).sort(),
        [
          "mastra_workspace_execute_command",
          "mastra_workspace_get_process_output",
          "mastra_workspace_kill_process",
          "mastra_workspace_write_file",
        ],
      );
    } finally {
      await sandbox._destroy();
    }
  });
});

describe("two agents", () => {
  test("their workspaces do not see each other's files or processes", async () => {
    const a = createSandpoolAgent({ model: scriptedModel([]).model, sessionId: sessionId("a"), redisUrl: dep.url });
    const { model: modelB, seen: seenB } = scriptedModel([]);
    const b = createSandpoolAgent({ model: modelB, sessionId: sessionId("b"), redisUrl: dep.url });
    try {
      const fsA = a.workspace.filesystem!;
      const fsB = b.workspace.filesystem!;
      await fsA.writeFile("secret.txt", "only for A\n");
      await fsB.writeFile("secret.txt", "only for B\n");
      assert.equal(await fsA.readFile("secret.txt", { encoding: "utf-8" }), "only for A\n");
      assert.equal(await fsB.readFile("secret.txt", { encoding: "utf-8" }), "only for B\n");
      await fsA.writeFile("/tmp/a-only", "x");
      assert.equal(await fsB.exists("/tmp/a-only"), false);
      assert.equal((await b.sandbox.executeCommand!("cat /tmp/a-only")).exitCode, 1);
      assert.equal((await b.sandbox.executeCommand!("cat secret.txt")).stdout, "only for B\n");

      const procA = await a.sandbox.processes.spawn("sleep 300");
      assert.equal(await b.sandbox.processes.get(procA.pid), undefined);
      assert.ok(!(await b.sandbox.processes.list()).some((p) => p.command?.includes("sleep 300")));
      const inB = await b.sandbox.executeCommand!("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '[s]leep 300' || true");
      assert.equal(inB.stdout.trim(), "0", "B's sandbox has no process of A's");

      // Through B's agent too: get_process_output of A's pid finds nothing.
      const { model, seen } = scriptedModel([
        () => ({ tool: "get_process_output", input: { pid: procA.pid } }),
        () => ({ text: "checked" }),
      ]);
      const bAgent = createSandpoolAgent({ model, sessionId: b.sandbox.id, redisUrl: dep.url });
      await bAgent.agent.generate("check", { maxSteps: 4 });
      assert.match(seen[1]?.lastToolResult ?? "", /No background process found/);
      await bAgent.sandbox.close();
      assert.equal(seenB.length, 0);
      await procA.kill();
    } finally {
      await a.sandbox._destroy();
      await b.sandbox._destroy();
    }
  });
});
