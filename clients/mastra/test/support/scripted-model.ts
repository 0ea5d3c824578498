/**
 * A scripted language model for agent tests: the AI SDK's own test model (`MockLanguageModelV3`
 * from `ai/test`), answering each step with the next entry of a script, either a tool call or a
 * final text. A step sees the tools offered and the last tool result, so it can use what a tool
 * returned (a background process's pid). No network, no API key.
 */

import { MockLanguageModelV3, simulateReadableStream } from "ai/test";

type CallOptions = Parameters<MockLanguageModelV3["doStream"]>[0];
type StreamPart = CallOptions extends never ? never : Awaited<ReturnType<MockLanguageModelV3["doStream"]>>["stream"] extends ReadableStream<infer P> ? P : never;

/** What a step of the script sees. */
export interface StepContext {
  /** Names of the tools offered to the model. */
  toolNames: string[];
  /** The text of the last tool result in the prompt, if any. */
  lastToolResult: string | null;
  /** The number of this step (0 for the first). */
  index: number;
}

/** A step: call `tool` (matched by its name's end, e.g. "execute_command") with `input`, or answer `text`. */
export type Step = (ctx: StepContext) => { tool: string; input: Record<string, unknown> } | { text: string };

function lastToolResult(prompt: CallOptions["prompt"]): string | null {
  for (let i = prompt.length - 1; i >= 0; i--) {
    const m = prompt[i];
    if (m === undefined || m.role !== "tool") continue;
    for (let j = m.content.length - 1; j >= 0; j--) {
      const part = m.content[j] as { type: string; output?: { type: string; value?: unknown } };
      if (part.type !== "tool-result" || part.output === undefined) continue;
      const v = part.output.value;
      return typeof v === "string" ? v : JSON.stringify(v);
    }
  }
  return null;
}

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 10, text: 10, reasoning: 0 },
};

/** The model, and every step's context and tool results for assertions. */
export function scriptedModel(steps: Step[]): { model: MockLanguageModelV3; seen: StepContext[] } {
  const seen: StepContext[] = [];
  let index = 0;
  const next = (options: CallOptions): StreamPart[] => {
    const toolNames = (options.tools ?? []).map((t) => t.name);
    const ctx: StepContext = { toolNames, lastToolResult: lastToolResult(options.prompt), index };
    seen.push(ctx);
    const step = steps[index++];
    const out = step ? step(ctx) : { text: "done" };
    const parts: StreamPart[] = [{ type: "stream-start", warnings: [] } as StreamPart];
    if ("tool" in out) {
      const name = toolNames.find((n) => n === out.tool || n.endsWith(out.tool));
      if (name === undefined) throw new Error(`no tool named like ${out.tool} among ${toolNames.join(", ")}`);
      parts.push({ type: "tool-call", toolCallId: `call-${index}`, toolName: name, input: JSON.stringify(out.input) } as StreamPart);
      parts.push({ type: "finish", usage, finishReason: { unified: "tool-calls", raw: "tool_calls" } } as StreamPart);
    } else {
      parts.push({ type: "text-start", id: `t${index}` } as StreamPart);
      parts.push({ type: "text-delta", id: `t${index}`, delta: out.text } as StreamPart);
      parts.push({ type: "text-end", id: `t${index}` } as StreamPart);
      parts.push({ type: "finish", usage, finishReason: { unified: "stop", raw: "stop" } } as StreamPart);
    }
    return parts;
  };
  const model = new MockLanguageModelV3({
    provider: "scripted",
    modelId: "scripted-agent",
    doStream: async (options) => ({ stream: simulateReadableStream({ chunks: next(options) }) }),
    // generate() asks for the whole answer at once: the same parts, as content.
    doGenerate: async (options) => {
      const parts = next(options) as { type: string; [k: string]: unknown }[];
      const content: unknown[] = [];
      let finishReason: unknown = { unified: "stop", raw: "stop" };
      for (const p of parts) {
        if (p.type === "tool-call") content.push(p);
        else if (p.type === "text-delta") content.push({ type: "text", text: p.delta });
        else if (p.type === "finish") finishReason = p.finishReason;
      }
      return { content, finishReason, usage, warnings: [] } as unknown as Awaited<ReturnType<MockLanguageModelV3["doGenerate"]>>;
    },
  });
  return { model, seen };
}
