/**
 * Circles between the modules of a TypeScript source folder, for the packages' tests (exported
 * through `sandpool/testing`): the client's and the Mastra provider's modules import one way
 * only, and a test fails when a change makes two of them depend on each other again.
 *
 * Reads the files' text, no compiler and no dependency: every relative `import ... from`,
 * `export ... from`, side-effect `import "..."` and dynamic `import("...")` counts, `import type`
 * included (a type-only circle is a circle in the design even though it vanishes at run time).
 * Comments are blanked first, so an import quoted in a comment does not count. Only the folder's
 * own `.ts` files are nodes; imports of packages and of files outside it are ignored.
 */

import { readdirSync, readFileSync } from "node:fs";
import { join, posix } from "node:path";

/** `from "./x.js"`, `import "./x.js"` and `import("./x.js")`, relative specifiers only. */
const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(?\s*)["'](\.{1,2}\/[^"']+)["']/g;

/** The text with its comments replaced by spaces (string contents are kept). */
function withoutComments(text: string): string {
  return text.replace(/("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)|\/\*[\s\S]*?\*\/|\/\/[^\n]*/g, (m, str: string | undefined) =>
    str !== undefined ? str : m.replace(/[^\n]/g, " "),
  );
}

/** The module a specifier names, as a file name of the folder (`./x.js` -> `x.ts`), or null. */
function target(spec: string): string | null {
  const p = posix.normalize(spec);
  if (p.startsWith("..") || p.includes("/")) return null; // outside the folder
  return p.replace(/\.(js|ts)$/, "") + ".ts";
}

/** Each `.ts` file of `dir` (not `.d.ts`) with the files of `dir` it imports. */
export function importGraph(dir: string): Map<string, Set<string>> {
  const files = readdirSync(dir).filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"));
  const graph = new Map<string, Set<string>>();
  for (const f of files) {
    const deps = new Set<string>();
    for (const m of withoutComments(readFileSync(join(dir, f), "utf8")).matchAll(SPECIFIER)) {
      const t = target(m[1] as string);
      if (t !== null && t !== f && files.includes(t)) deps.add(t);
    }
    graph.set(f, deps);
  }
  return graph;
}

/**
 * The circles of the import graph of `dir`: each strongly connected group of files (two or
 * more), sorted, as a list of file names. Empty when imports go one way.
 */
export function importCycles(dir: string): string[][] {
  const graph = importGraph(dir);
  // Tarjan's strongly connected components.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const groups: string[][] = [];
  let next = 0;
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
      }
    }
    if (low.get(v) === index.get(v)) {
      const group: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        onStack.delete(w);
        group.push(w);
      } while (w !== v);
      if (group.length > 1) groups.push(group.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return groups.sort((a, b) => (a[0] as string).localeCompare(b[0] as string));
}
