/**
 * `SandpoolFilesystem`: a Mastra workspace filesystem (`MastraFilesystem`) on the files of a
 * {@link SandpoolSandbox}'s session, so that an agent's file tools and its commands see the same
 * files.
 *
 * Paths: an absolute path is that path in the session; a relative one resolves against
 * `basePath` (default: the sandbox's working directory, `/work`, where commands start). So a
 * file the agent writes as `notes.txt` is what `cat notes.txt` reads.
 *
 * Errors: sandpool's error codes become Mastra's classes (`not_found` -> FileNotFoundError or
 * DirectoryNotFoundError, `exists` -> FileExistsError, `is_a_directory` -> IsDirectoryError,
 * `not_a_directory` -> NotDirectoryError, `permission` -> PermissionError, `conflict` ->
 * StaleFileError); others (`no_space`, `not_a_file`, ...) a FilesystemError with an errno-like
 * code (ENOSPC, EINVAL, ...).
 *
 * Every operation starts the sandbox if needed (and restarts a session stopped from outside), as
 * commands do.
 */

import { posix } from "node:path";

import {
  DirectoryNotEmptyError,
  DirectoryNotFoundError,
  FileExistsError,
  FileNotFoundError,
  FilesystemError,
  IsDirectoryError,
  MastraFilesystem,
  NotDirectoryError,
  PermissionError,
  StaleFileError,
  WorkspaceReadOnlyError,
  type CopyOptions,
  type FileContent,
  type FileEntry,
  type FilesystemInfo,
  type FileStat,
  type ListOptions,
  type MastraFilesystemOptions,
  type ProviderStatus,
  type ReadOptions,
  type RemoveOptions,
  type WalkEntry,
  type WalkOptions,
  type WriteOptions,
} from "@mastra/core/workspace";
import type { RequestContext } from "@mastra/core/request-context";
import { MAX_FILE_CALL_BYTES, SessionError, type ListEntry, type Session } from "sandpool";

import type { SandpoolSandbox } from "./sandbox.js";

/** Options of {@link SandpoolFilesystem}. */
export interface SandpoolFilesystemOptions extends MastraFilesystemOptions {
  /** The sandbox whose session holds the files. */
  sandbox: SandpoolSandbox;
  id?: string;
  /** Where relative paths resolve (default: the sandbox's working directory). */
  basePath?: string;
  /** Refuse every change (`WorkspaceReadOnlyError`). */
  readOnly?: boolean;
  /** Act as the session's root user instead of its unprivileged user. */
  asRoot?: boolean;
  displayName?: string;
  description?: string;
  instructions?: string | ((opts: { defaultInstructions: string; requestContext?: RequestContext | undefined }) => string);
}

const MIME: Record<string, string> = {
  txt: "text/plain", md: "text/markdown", html: "text/html", htm: "text/html", css: "text/css", csv: "text/csv",
  js: "application/javascript", mjs: "application/javascript", cjs: "application/javascript", jsx: "application/javascript",
  ts: "application/typescript", tsx: "application/typescript", json: "application/json", jsonl: "application/jsonl",
  xml: "application/xml", yaml: "text/yaml", yml: "text/yaml", toml: "text/toml", ini: "text/plain", log: "text/plain",
  py: "text/x-python", rb: "text/x-ruby", go: "text/x-go", rs: "text/x-rust", java: "text/x-java", c: "text/x-c",
  h: "text/x-c", cpp: "text/x-c++", hpp: "text/x-c++", sh: "text/x-sh", bash: "text/x-sh", sql: "text/x-sql",
  svg: "image/svg+xml", png: "image/png", jpg: "image/jpeg", jpeg: "image/jpeg", gif: "image/gif", webp: "image/webp",
  pdf: "application/pdf", zip: "application/zip", gz: "application/gzip", tar: "application/x-tar", wasm: "application/wasm",
};

function mimeType(path: string): string {
  const ext = posix.extname(path).slice(1).toLowerCase();
  return Object.hasOwn(MIME, ext) ? (MIME[ext] as string) : "application/octet-stream";
}

function nsToDate(ns: bigint): Date {
  return new Date(Number(ns / 1_000_000n));
}

function toBuffer(content: FileContent): Buffer {
  if (typeof content === "string") return Buffer.from(content, "utf8");
  return Buffer.isBuffer(content) ? content : Buffer.from(content);
}

/** A Mastra workspace filesystem on a sandpool session's files. */
export class SandpoolFilesystem extends MastraFilesystem {
  readonly id: string;
  readonly name = "SandpoolFilesystem";
  readonly provider = "sandpool";
  readonly readOnly?: boolean;
  readonly displayName?: string;
  readonly description?: string;
  status: ProviderStatus = "pending";
  /** The sandbox whose session holds the files. */
  readonly sandbox: SandpoolSandbox;
  private readonly base: string;
  private readonly asRoot: boolean | undefined;
  private readonly instructionsOption: SandpoolFilesystemOptions["instructions"];
  /** The exact mtime (ns) last seen per path, for Mastra's millisecond `expectedMtime`. */
  private readonly mtimes = new Map<string, bigint>();

  constructor(options: SandpoolFilesystemOptions) {
    super({ ...options, name: "SandpoolFilesystem" });
    this.sandbox = options.sandbox;
    this.id = options.id ?? `sandpool-fs-${options.sandbox.id}`;
    this.base = posix.resolve("/", options.basePath ?? options.sandbox.workingDirectory ?? "/work");
    if (options.readOnly !== undefined) this.readOnly = options.readOnly;
    if (options.displayName !== undefined) this.displayName = options.displayName;
    if (options.description !== undefined) this.description = options.description;
    this.asRoot = options.asRoot;
    this.instructionsOption = options.instructions;
  }

  /** The directory relative paths resolve against. */
  get root(): string {
    return this.base;
  }

  /** The absolute session path of `path`. */
  resolve(path: string): string {
    return posix.resolve(this.base, path);
  }

  private writable(op: string): void {
    if (this.readOnly) throw new WorkspaceReadOnlyError(op);
  }

  private async run<T>(fn: (s: Session) => Promise<T>): Promise<T> {
    await this.ensureReady();
    return this.sandbox.withSession(fn);
  }

  /** Mastra's error for a sandpool error about `path` (see the module comment). */
  private mapError(e: unknown, path: string, op: string, notFound: "file" | "dir" = "file"): unknown {
    if (!(e instanceof SessionError)) return e;
    switch (e.code) {
      case "not_found":
        return notFound === "dir" ? new DirectoryNotFoundError(path) : new FileNotFoundError(path);
      case "exists":
        return new FileExistsError(path);
      case "not_empty":
        return new DirectoryNotEmptyError(path);
      case "is_a_directory":
        return new IsDirectoryError(path);
      case "not_a_directory":
        return new NotDirectoryError(path);
      case "permission":
        return new PermissionError(path, op);
      case "no_space":
        return new FilesystemError(`No space left in the sandbox: ${path}`, "ENOSPC", path);
      case "not_a_file":
        return new FilesystemError(`Not a regular file: ${path}`, "EINVAL", path);
      case "too_large":
        return new FilesystemError(`Too large: ${path}: ${e.detail}`, "EFBIG", path);
      default:
        return e;
    }
  }

  // -- reading -----------------------------------------------------------------------------

  async readFile(path: string, options: ReadOptions = {}): Promise<string | Buffer> {
    const abs = this.resolve(path);
    let data: Buffer;
    try {
      data = await this.run(async (s) => {
        // At most 16 MiB per call: a larger read is refused, not shortened.
        const first = await s.read(abs, { asRoot: this.asRoot, length: MAX_FILE_CALL_BYTES });
        this.mtimes.set(abs, first.mtimeNs);
        if (first.data.length >= first.size) return first.data;
        const parts = [first.data];
        for (let off = first.data.length; off < first.size; ) {
          const r = await s.read(abs, { asRoot: this.asRoot, offset: off, length: MAX_FILE_CALL_BYTES });
          if (r.data.length === 0) break;
          parts.push(r.data);
          off += r.data.length;
        }
        return Buffer.concat(parts);
      });
    } catch (e) {
      throw this.mapError(e, path, "readFile");
    }
    return options.encoding ? data.toString(options.encoding) : data;
  }

  async exists(path: string): Promise<boolean> {
    const abs = this.resolve(path);
    try {
      return (await this.run((s) => s.exists(abs, { asRoot: this.asRoot }))).exists;
    } catch (e) {
      throw this.mapError(e, path, "exists");
    }
  }

  async stat(path: string): Promise<FileStat> {
    const abs = this.resolve(path);
    let st;
    try {
      st = await this.run((s) => s.stat(abs, { follow: true, asRoot: this.asRoot }));
    } catch (e) {
      throw this.mapError(e, path, "stat");
    }
    this.mtimes.set(abs, st.mtimeNs);
    const isDir = st.type === "dir";
    const out: FileStat = {
      name: posix.basename(abs),
      path: abs,
      type: isDir ? "directory" : "file",
      size: isDir ? 0 : st.size,
      createdAt: nsToDate(st.ctimeNs),
      modifiedAt: nsToDate(st.mtimeNs),
    };
    if (!isDir) out.mimeType = mimeType(abs);
    return out;
  }

  async readdir(path: string, options: ListOptions = {}): Promise<FileEntry[]> {
    const abs = this.resolve(path);
    let entries: ListEntry[];
    try {
      entries = await this.run(async (s) => {
        const r = await s.list(abs, {
          asRoot: this.asRoot,
          recursive: options.recursive,
          depth: options.recursive && options.maxDepth !== undefined ? options.maxDepth + 1 : undefined,
        });
        return r.entries;
      });
    } catch (e) {
      throw this.mapError(e, path, "readdir", "dir");
    }
    const exts = options.extension === undefined ? null : (Array.isArray(options.extension) ? options.extension : [options.extension]);
    const out: FileEntry[] = [];
    for (const e of entries) {
      const rel = posix.relative(abs, e.path) || e.name;
      const entry = await this.entryOf(e, rel);
      if (exts !== null && entry.type === "file") {
        const ext = posix.extname(e.name);
        if (!exts.some((x) => x === ext || x === ext.slice(1))) continue;
      }
      out.push(entry);
    }
    return out;
  }

  /** Every entry under `path` in one `list` call (paths relative to it). */
  async walk(path: string, options: WalkOptions = {}): Promise<WalkEntry[]> {
    const abs = this.resolve(path);
    let entries: ListEntry[];
    try {
      entries = (await this.run((s) => s.list(abs, { asRoot: this.asRoot, recursive: true, depth: options.maxDepth })))
        .entries;
    } catch (e) {
      throw this.mapError(e, path, "walk", "dir");
    }
    const out: WalkEntry[] = [];
    for (const e of entries) {
      const rel = posix.relative(abs, e.path);
      if (!options.includeHidden && rel.split("/").some((seg) => seg.startsWith("."))) continue;
      out.push({ ...(await this.entryOf(e, e.name)), path: rel });
    }
    return out;
  }

  private async entryOf(e: ListEntry, name: string): Promise<FileEntry> {
    if (e.type === "link") {
      let type: "file" | "directory" = "file";
      try {
        const target = await this.sandbox.session.stat(e.path, { follow: true, asRoot: this.asRoot });
        if (target.type === "dir") type = "directory";
      } catch {
        // a dangling link reads as a file
      }
      const entry: FileEntry = { name, type, isSymlink: true };
      if (e.target !== null) entry.symlinkTarget = e.target;
      return entry;
    }
    if (e.type === "dir") return { name, type: "directory" };
    return { name, type: "file", size: e.size };
  }

  // -- writing -----------------------------------------------------------------------------

  async writeFile(path: string, content: FileContent, options: WriteOptions = {}): Promise<void> {
    this.writable("writeFile");
    const abs = this.resolve(path);
    const data = toBuffer(content);
    try {
      await this.run(async (s) => {
        let expected: bigint | undefined;
        if (options.expectedMtime !== undefined) expected = await this.exactMtime(s, abs, path, options.expectedMtime);
        const first = data.subarray(0, MAX_FILE_CALL_BYTES);
        const [w] = await s.write(
          [{ path: abs, data: first, parents: options.recursive !== false, overwrite: options.overwrite !== false, expectedMtimeNs: expected }],
          { asRoot: this.asRoot },
        );
        let mtime = w?.mtimeNs;
        for (let off = MAX_FILE_CALL_BYTES; off < data.length; off += MAX_FILE_CALL_BYTES) {
          mtime = (await s.append(abs, data.subarray(off, off + MAX_FILE_CALL_BYTES), { asRoot: this.asRoot })).mtimeNs;
        }
        if (mtime !== undefined) this.mtimes.set(abs, mtime);
      });
    } catch (e) {
      if (e instanceof StaleFileError) throw e;
      if (e instanceof SessionError && e.code === "conflict" && options.expectedMtime !== undefined) {
        const now = await this.sandbox.session.stat(abs, { asRoot: this.asRoot }).then((st) => nsToDate(st.mtimeNs)).catch(() => new Date(0));
        throw new StaleFileError(path, options.expectedMtime, now);
      }
      if (e instanceof SessionError && e.code === "not_found") throw new DirectoryNotFoundError(posix.dirname(path));
      throw this.mapError(e, path, "writeFile");
    }
  }

  /**
   * The exact mtime (ns) to send for Mastra's millisecond `expectedMtime`: the one last seen for
   * the path if it is that millisecond, else the file's now if it is; else the file changed:
   * StaleFileError. A missing file has nothing to compare (the write creates it).
   */
  private async exactMtime(s: Session, abs: string, path: string, expected: Date): Promise<bigint | undefined> {
    const cached = this.mtimes.get(abs);
    if (cached !== undefined && nsToDate(cached).getTime() === expected.getTime()) return cached;
    let now: bigint;
    try {
      now = (await s.stat(abs, { asRoot: this.asRoot })).mtimeNs;
    } catch (e) {
      if (e instanceof SessionError && e.code === "not_found") return undefined;
      throw e;
    }
    if (nsToDate(now).getTime() !== expected.getTime()) throw new StaleFileError(path, expected, nsToDate(now));
    return now;
  }

  async appendFile(path: string, content: FileContent): Promise<void> {
    this.writable("appendFile");
    const abs = this.resolve(path);
    const data = toBuffer(content);
    try {
      await this.run(async (s) => {
        for (let off = 0; off < data.length || off === 0; off += MAX_FILE_CALL_BYTES) {
          const r = await s.append(abs, data.subarray(off, off + MAX_FILE_CALL_BYTES), { parents: true, asRoot: this.asRoot });
          this.mtimes.set(abs, r.mtimeNs);
          if (data.length === 0) break;
        }
      });
    } catch (e) {
      throw this.mapError(e, path, "appendFile");
    }
  }

  async deleteFile(path: string, options: RemoveOptions = {}): Promise<void> {
    this.writable("deleteFile");
    const abs = this.resolve(path);
    try {
      await this.run(async (s) => {
        const ex = await s.exists(abs, { asRoot: this.asRoot });
        if (!ex.exists) {
          if (options.force) return;
          throw new FileNotFoundError(path);
        }
        if (ex.type === "dir") throw new IsDirectoryError(path);
        await s.remove(abs, { force: options.force, asRoot: this.asRoot });
      });
    } catch (e) {
      if (e instanceof FilesystemError) throw e;
      throw this.mapError(e, path, "deleteFile");
    }
    this.mtimes.delete(abs);
  }

  async copyFile(src: string, dest: string, options: CopyOptions = {}): Promise<void> {
    this.writable("copyFile");
    const from = this.resolve(src);
    const to = this.resolve(dest);
    try {
      await this.run(async (s) => {
        const ex = await s.exists(from, { asRoot: this.asRoot });
        if (!ex.exists) throw new FileNotFoundError(src);
        if (ex.type === "dir" && !options.recursive) throw new IsDirectoryError(src);
        await s.mkdir(posix.dirname(to), { asRoot: this.asRoot });
        await s.copy(from, to, { recursive: options.recursive, overwrite: options.overwrite !== false, asRoot: this.asRoot });
      });
    } catch (e) {
      if (e instanceof FilesystemError) throw e;
      throw this.mapError(e, e instanceof SessionError && e.code === "exists" ? dest : src, "copyFile");
    }
  }

  async moveFile(src: string, dest: string, options: CopyOptions = {}): Promise<void> {
    this.writable("moveFile");
    const from = this.resolve(src);
    const to = this.resolve(dest);
    try {
      await this.run(async (s) => {
        await s.mkdir(posix.dirname(to), { asRoot: this.asRoot });
        await s.rename(from, to, { overwrite: options.overwrite !== false, asRoot: this.asRoot });
      });
    } catch (e) {
      throw this.mapError(e, e instanceof SessionError && e.code === "exists" ? dest : src, "moveFile");
    }
    this.mtimes.delete(from);
  }

  async mkdir(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    this.writable("mkdir");
    const abs = this.resolve(path);
    try {
      await this.run(async (s) => {
        const ex = await s.exists(abs, { asRoot: this.asRoot });
        if (ex.exists) {
          if (ex.type === "dir") return;
          throw new FileExistsError(path);
        }
        await s.mkdir(abs, { parents: options.recursive ?? true, asRoot: this.asRoot });
      });
    } catch (e) {
      if (e instanceof FilesystemError) throw e;
      if (e instanceof SessionError && e.code === "not_found") throw new DirectoryNotFoundError(posix.dirname(path));
      if (e instanceof SessionError && (e.code === "exists" || e.code === "not_a_directory")) throw new FileExistsError(path);
      throw this.mapError(e, path, "mkdir");
    }
  }

  async rmdir(path: string, options: RemoveOptions = {}): Promise<void> {
    this.writable("rmdir");
    const abs = this.resolve(path);
    try {
      await this.run(async (s) => {
        const ex = await s.exists(abs, { asRoot: this.asRoot });
        if (!ex.exists) {
          if (options.force) return;
          throw new DirectoryNotFoundError(path);
        }
        if (ex.type !== "dir") throw new NotDirectoryError(path);
        // Without recursive, a non-empty directory is `not_empty` (DirectoryNotEmptyError).
        await s.remove(abs, { recursive: options.recursive === true, force: options.force, asRoot: this.asRoot });
      });
    } catch (e) {
      if (e instanceof FilesystemError) throw e;
      throw this.mapError(e, path, "rmdir", "dir");
    }
  }

  // -- about -------------------------------------------------------------------------------

  getInfo(): FilesystemInfo {
    const info: FilesystemInfo = {
      id: this.id,
      name: this.name,
      provider: this.provider,
      status: this.status,
      metadata: { sessionId: this.sandbox.id, basePath: this.base, asRoot: this.asRoot ?? false },
    };
    if (this.readOnly !== undefined) info.readOnly = this.readOnly;
    if (this.error !== undefined) info.error = this.error;
    return info;
  }

  getInstructions(opts?: { requestContext?: RequestContext }): string {
    const defaultInstructions =
      `Files of the sandbox (sandpool session "${this.sandbox.id}"): the same files its commands see. ` +
      `Relative paths resolve from ${this.base} (the commands' working directory); absolute paths are paths in the sandbox.` +
      (this.readOnly ? " Read-only." : "");
    const o = this.instructionsOption;
    if (typeof o === "string") return o;
    if (typeof o === "function") return o({ defaultInstructions, requestContext: opts?.requestContext });
    return defaultInstructions;
  }
}
