/**
 * Redis address parsing: the same URL forms the daemon accepts with `--redis` and the same rules
 * as the Python client (clients/python/sandpool/_url.py).
 *
 *     redis://[user:password@]host[:port][/db]     port defaults to 6379, db to 0
 *     redis://:password@host:port                  password only (AUTH <password>)
 *     redis://password@host:port                   a lone userinfo is the password (as redis-cli -u)
 *     redis://[::1]:6379                           IPv6 in brackets
 *     unix:///path/to/redis.sock[?db=N][&user=U][&password=P]
 *
 * User and password are percent-decoded, so they may contain `:`, `@` or `/` as `%3A`, `%40`,
 * `%2F`. An empty password means no AUTH; a password without a user means `AUTH <password>`;
 * both mean `AUTH <user> <password>`.
 */

import { InvalidArgumentError } from "./errors.js";

/** The Redis URL used when none is given and `SANDPOOL_REDIS_URL` is not set. */
export const DEFAULT_URL = "redis://127.0.0.1:6379";

/** A parsed Redis URL. Exactly one of `host` and `unixPath` is set. */
export class RedisAddress {
  readonly host: string | null;
  readonly port: number;
  readonly unixPath: string | null;
  /** `null`: AUTH with the password only (or no AUTH). */
  readonly user: string | null;
  /** `null`: no AUTH. */
  readonly password: string | null;
  readonly db: number;

  constructor(fields: {
    host?: string | null;
    port?: number;
    unixPath?: string | null;
    user?: string | null;
    password?: string | null;
    db?: number;
  }) {
    this.host = fields.host ?? null;
    this.port = fields.port ?? 6379;
    this.unixPath = fields.unixPath ?? null;
    this.user = fields.user ?? null;
    this.password = fields.password ?? null;
    this.db = fields.db ?? 0;
  }

  /** The address as a URL with the password replaced by `***` (for logs and errors). */
  redacted(): string {
    if (this.unixPath !== null) {
      const params: string[] = [];
      if (this.db) params.push(`db=${this.db}`);
      if (this.user) params.push(`user=${encodeURIComponent(this.user)}`);
      if (this.password !== null) params.push("password=***");
      return `unix://${this.unixPath}` + (params.length ? "?" + params.join("&") : "");
    }
    let auth = "";
    if (this.password !== null || this.user) {
      auth = encodeURIComponent(this.user ?? "");
      auth += this.password !== null ? ":***@" : "@";
    }
    const host = this.host !== null && this.host.includes(":") ? `[${this.host}]` : this.host;
    return `redis://${auth}${host}:${this.port}/${this.db}`;
  }

  toString(): string {
    return this.redacted();
  }
}

/** Hide user information and password parameters so that no error message shows a secret. */
function redactRaw(url: string): string {
  const i = url.indexOf("://");
  if (i < 0) return url.replace(/(password=)[^&#]*/gi, "$1***");
  const scheme = url.slice(0, i + 3);
  let rest = url.slice(i + 3);
  const at = rest.lastIndexOf("@");
  if (at >= 0) rest = "***@" + rest.slice(at + 1);
  rest = rest.replace(/(password=)[^&#]*/gi, "$1***");
  return scheme + rest;
}

/** Percent-decoding as Python's urllib.parse.unquote: lenient, UTF-8 with replacement. */
function unquote(s: string): string {
  if (!s.includes("%")) return s;
  return s.replace(/(?:%[0-9A-Fa-f]{2})+/g, (run) => {
    const bytes = Buffer.from(run.replace(/%/g, ""), "hex");
    return bytes.toString("utf8");
  });
}

interface SplitUrl {
  scheme: string;
  netloc: string;
  path: string;
  query: string;
  fragment: string;
}

/** A small urlsplit: `scheme://netloc/path?query#fragment`. */
function splitUrl(url: string): SplitUrl | null {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):(.*)$/s.exec(url);
  if (m === null) return null;
  const scheme = m[1] ?? "";
  let rest = m[2] ?? "";
  let fragment = "";
  const hash = rest.indexOf("#");
  if (hash >= 0) {
    fragment = rest.slice(hash + 1);
    rest = rest.slice(0, hash);
  }
  let query = "";
  const q = rest.indexOf("?");
  if (q >= 0) {
    query = rest.slice(q + 1);
    rest = rest.slice(0, q);
  }
  let netloc = "";
  if (rest.startsWith("//")) {
    rest = rest.slice(2);
    const slash = rest.indexOf("/");
    netloc = slash >= 0 ? rest.slice(0, slash) : rest;
    rest = slash >= 0 ? rest.slice(slash) : "";
  }
  return { scheme, netloc, path: rest, query, fragment };
}

function parseDb(text: string, url: string): number {
  if (!/^[0-9]+$/.test(text)) {
    throw new InvalidArgumentError(
      `invalid db number ${JSON.stringify(text)} in Redis URL ${JSON.stringify(redactRaw(url))}`,
    );
  }
  return Number.parseInt(text, 10);
}

function userinfo(netloc: string): [string | null, string | null] {
  const at = netloc.lastIndexOf("@");
  if (at < 0) return [null, null];
  const info = netloc.slice(0, at);
  let user: string;
  let password: string;
  const colon = info.indexOf(":");
  if (colon >= 0) {
    user = info.slice(0, colon);
    password = info.slice(colon + 1);
  } else {
    user = ""; // "redis://secret@host": the lone userinfo is the password
    password = info;
  }
  return [unquote(user) || null, unquote(password) || null];
}

/**
 * Parse `url` into a {@link RedisAddress}. Throws {@link InvalidArgumentError} (with the password
 * redacted from the message) if the URL is not one of the accepted forms.
 */
export function parseRedisUrl(url: string): RedisAddress {
  if (typeof url !== "string" || url === "") {
    throw new InvalidArgumentError("Redis URL must be a non-empty string");
  }
  const shown = JSON.stringify(redactRaw(url));
  const parts = splitUrl(url);
  const scheme = parts?.scheme.toLowerCase() ?? "";
  if (parts === null || (scheme !== "redis" && scheme !== "unix")) {
    throw new InvalidArgumentError(
      `unsupported Redis URL scheme ${JSON.stringify(parts?.scheme ?? "")} ` +
        `(expected redis:// or unix://): ${shown}`,
    );
  }
  if (parts.fragment) {
    throw new InvalidArgumentError(`Redis URL must not have a fragment: ${shown}`);
  }
  if (scheme === "redis") {
    const [user, password] = userinfo(parts.netloc);
    const hostinfo = parts.netloc.slice(parts.netloc.lastIndexOf("@") + 1);
    let host: string;
    let portText: string;
    if (hostinfo.includes("[")) {
      const m = /^\[([^\]]*)\](?::(.*))?$/s.exec(hostinfo);
      if (m === null) throw new InvalidArgumentError(`invalid IPv6 address in Redis URL ${shown}`);
      host = m[1] ?? "";
      portText = m[2] ?? "";
    } else {
      const colon = hostinfo.indexOf(":");
      host = colon >= 0 ? hostinfo.slice(0, colon) : hostinfo;
      portText = colon >= 0 ? hostinfo.slice(colon + 1) : "";
    }
    host = host.toLowerCase();
    let port = 6379;
    if (portText !== "") {
      if (!/^[0-9]+$/.test(portText) || Number(portText) > 65535 || Number(portText) === 0) {
        throw new InvalidArgumentError(`invalid port in Redis URL ${shown}`);
      }
      port = Number(portText);
    }
    if (!host) throw new InvalidArgumentError(`Redis URL has no host: ${shown}`);
    if (parts.query) throw new InvalidArgumentError(`redis:// URL takes no query: ${shown}`);
    let db = 0;
    if (parts.path !== "" && parts.path !== "/") db = parseDb(parts.path.slice(1), url);
    return new RedisAddress({ host, port, user, password, db });
  }
  // unix://
  if (parts.netloc.includes("@")) {
    throw new InvalidArgumentError(
      "unix:// URLs take credentials as query parameters: unix:///path?user=U&password=P",
    );
  }
  if (parts.netloc) {
    throw new InvalidArgumentError(
      `unix:// URL must be unix:///absolute/path (got host ${JSON.stringify(parts.netloc)})`,
    );
  }
  const path = unquote(parts.path);
  if (!path.startsWith("/") || path === "/") {
    throw new InvalidArgumentError(`unix:// URL needs an absolute socket path: ${shown}`);
  }
  let db = 0;
  let user: string | null = null;
  let password: string | null = null;
  if (parts.query) {
    const q = new URLSearchParams(parts.query);
    const known = new Set(["db", "user", "password"]);
    const names = [...new Set(q.keys())];
    const unknown = names.filter((n) => !known.has(n)).sort();
    if (unknown.length) {
      throw new InvalidArgumentError(
        `unknown query parameter(s) ${JSON.stringify(unknown)} in Redis URL (known: db, user, password)`,
      );
    }
    for (const name of names) {
      if (q.getAll(name).length !== 1) {
        throw new InvalidArgumentError(`${name} given more than once in Redis URL`);
      }
    }
    const dbText = q.get("db");
    if (dbText !== null) db = parseDb(dbText, url);
    user = q.get("user") || null;
    password = q.get("password") || null;
  }
  return new RedisAddress({ unixPath: path, user, password, db });
}
