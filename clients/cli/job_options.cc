#include "clients/cli/job_options.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <charconv>
#include <limits>

#include "common/fd.h"

namespace sandpool::cli {
namespace {

// Protocol bound on stdin (PROTOCOL.md section 3); more is refused before it is read.
constexpr size_t kMaxStdin = 16u << 20;

// Splits "--name=value" into name/value; for "--name" the value is taken from the next argument.
// Returns the value or an error when it is missing.
Result<std::string> OptionValue(const std::vector<std::string>& args, size_t* i,
                                std::string_view name) {
  const std::string& a = args[*i];
  if (a.size() > name.size() && a[name.size()] == '=') return a.substr(name.size() + 1);
  if (*i + 1 >= args.size()) return Status::Error(std::string(name) + " needs a value");
  ++*i;
  return args[*i];
}

// True when args[i] is `name` or `name=...`.
bool Is(const std::string& arg, std::string_view name) {
  return arg == name || (arg.size() > name.size() && arg.starts_with(name) && arg[name.size()] == '=');
}

Result<uint64_t> ParseUint(std::string_view s, std::string_view what) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
    return Status::Error(std::string(what) + ": not a non-negative integer: '" + std::string(s) + "'");
  }
  return v;
}

bool ValidEnvName(std::string_view n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

Result<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("--stdin-file " + path);
  auto r = ReadAllFd(fd.get(), kMaxStdin);
  if (!r.ok()) return r.status().Prefixed("--stdin-file " + path);
  return r;
}

}  // namespace

Result<bool> ConsumeGlobalOption(const std::vector<std::string>& args, size_t* i,
                                 GlobalOptions* g) {
  const std::string& a = args[*i];
  std::string* target = nullptr;
  std::string_view name;
  if (Is(a, "--redis")) {
    target = &g->redis_url;
    name = "--redis";
  } else if (Is(a, "--prefix")) {
    target = &g->prefix;
    name = "--prefix";
  } else if (Is(a, "--queue")) {
    target = &g->queue;
    name = "--queue";
  } else {
    return false;
  }
  auto v = OptionValue(args, i, name);
  if (!v.ok()) return v.status();
  if (v.value().empty()) return Status::Error(std::string(name) + " must not be empty");
  *target = std::move(v).value();
  return true;
}

Result<uint64_t> ParseSeconds(std::string_view s) {
  size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? "" : s.substr(dot + 1);
  if ((whole.empty() && frac.empty()) || frac.size() > 3 ||
      (dot != std::string_view::npos && frac.empty())) {
    return Status::Error("not a number of seconds (at most 3 decimals): '" + std::string(s) + "'");
  }
  uint64_t w = 0, f = 0;
  if (!whole.empty()) {
    auto r = ParseUint(whole, "seconds");
    if (!r.ok()) return r.status();
    w = r.value();
  }
  if (!frac.empty()) {
    auto r = ParseUint(frac, "seconds");
    if (!r.ok()) return r.status();
    f = r.value();
    for (size_t k = frac.size(); k < 3; ++k) f *= 10;
  }
  if (w > std::numeric_limits<uint64_t>::max() / 1000 - 1) {
    return Status::Error("too many seconds: '" + std::string(s) + "'");
  }
  uint64_t ms = w * 1000 + f;
  if (ms == 0) return Status::Error("must be more than 0");
  return ms;
}

Result<uint64_t> ParseByteSize(std::string_view s) {
  uint64_t mult = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'k': case 'K': mult = uint64_t{1} << 10; break;
      case 'm': case 'M': mult = uint64_t{1} << 20; break;
      case 'g': case 'G': mult = uint64_t{1} << 30; break;
      default: break;
    }
    if (mult != 1) s.remove_suffix(1);
  }
  auto r = ParseUint(s, "size");
  if (!r.ok()) return r.status();
  if (r.value() > std::numeric_limits<uint64_t>::max() / mult) return Status::Error("size too large");
  return r.value() * mult;
}

Result<std::string> ReadAllFd(int fd, size_t max) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read");
    }
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > max) {
      return Status::Error("more than " + std::to_string(max) + " bytes");
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

Result<std::string> NewJobId() {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("getrandom");
    }
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (unsigned char c : raw) {
    id += kHex[c >> 4];
    id += kHex[c & 15];
  }
  return id;
}

Result<JobOptions> ParseJobOptions(const std::vector<std::string>& args, GlobalOptions* g,
                                   Result<std::string> (*read_stdin)()) {
  JobOptions o;
  bool have_timeout = false, have_stdin = false;
  std::optional<std::string> stdin_file;
  bool stdin_self = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--help" || a == "-h") {
      o.help = true;
      return o;
    }
    auto global = ConsumeGlobalOption(args, &i, g);
    if (!global.ok()) return global.status();
    if (global.value()) continue;
    if (a == "--json") {
      o.json = true;
      continue;
    }
    if (a == "--stdin") {
      if (have_stdin) return Status::Error("--stdin and --stdin-file are exclusive");
      have_stdin = stdin_self = true;
      continue;
    }
    auto value = [&](std::string_view name) { return OptionValue(args, &i, name); };
    if (Is(a, "--timeout") || Is(a, "--timeout-ms")) {
      bool secs = Is(a, "--timeout");
      if (have_timeout) return Status::Error("--timeout / --timeout-ms given twice");
      have_timeout = true;
      auto v = value(secs ? "--timeout" : "--timeout-ms");
      if (!v.ok()) return v.status();
      Result<uint64_t> ms = secs ? ParseSeconds(v.value()) : ParseUint(v.value(), "--timeout-ms");
      if (!ms.ok()) return ms.status().Prefixed(secs ? "--timeout" : "--timeout-ms");
      if (ms.value() == 0) return Status::Error("--timeout-ms: must be more than 0");
      o.spec.timeout_ms = ms.value();
    } else if (Is(a, "--env")) {
      auto v = value("--env");
      if (!v.ok()) return v.status();
      size_t eq = v.value().find('=');
      if (eq == std::string::npos) return Status::Error("--env wants NAME=VALUE, got '" + v.value() + "'");
      std::string name = v.value().substr(0, eq);
      if (!ValidEnvName(name)) return Status::Error("--env: invalid name '" + name + "'");
      // A later --env for the same name wins, as in env(1).
      std::string val = v.value().substr(eq + 1);
      bool replaced = false;
      for (auto& [k, old] : o.spec.env) {
        if (k == name) {
          old = val;
          replaced = true;
        }
      }
      if (!replaced) o.spec.env.emplace_back(std::move(name), std::move(val));
    } else if (Is(a, "--cwd")) {
      auto v = value("--cwd");
      if (!v.ok()) return v.status();
      if (v.value().empty() || v.value()[0] != '/') return Status::Error("--cwd must be absolute");
      o.spec.cwd = v.value();
    } else if (Is(a, "--stdin-file")) {
      if (have_stdin) return Status::Error("--stdin and --stdin-file are exclusive");
      have_stdin = true;
      auto v = value("--stdin-file");
      if (!v.ok()) return v.status();
      stdin_file = v.value();
    } else if (Is(a, "--max-output")) {
      auto v = value("--max-output");
      if (!v.ok()) return v.status();
      auto n = ParseByteSize(v.value());
      if (!n.ok()) return n.status().Prefixed("--max-output");
      o.spec.max_output_bytes = n.value();
      o.send_max_output = true;
    } else if (Is(a, "--id")) {
      auto v = value("--id");
      if (!v.ok()) return v.status();
      if (!ValidJobId(v.value())) {
        return Status::Error("--id must be 1..128 characters of [A-Za-z0-9._:-]");
      }
      o.spec.id = v.value();
    } else if (Is(a, "--retries")) {
      auto v = value("--retries");
      if (!v.ok()) return v.status();
      auto n = ParseUint(v.value(), "--retries");
      if (!n.ok()) return n.status();
      if (n.value() > 5) return Status::Error("--retries: at most 5");
      o.spec.retries = static_cast<uint32_t>(n.value());
    } else if (Is(a, "--shell")) {
      if (o.spec.shell) return Status::Error("--shell given twice");
      auto v = value("--shell");
      if (!v.ok()) return v.status();
      o.spec.shell = v.value();
    } else if (Is(a, "--python") || Is(a, "--node") || Is(a, "--bash")) {
      std::string flag = a.substr(0, a.find('='));
      if (o.spec.code) return Status::Error("give one of --python, --node, --bash");
      auto v = value(flag.c_str());
      if (!v.ok()) return v.status();
      o.spec.code = v.value();
      o.spec.runtime = flag.substr(2);
    } else if (Is(a, "--template")) {
      auto v = value("--template");
      if (!v.ok()) return v.status();
      if (!ValidTemplateName(v.value())) return Status::Error("--template: 1..64 characters of [A-Za-z0-9._-]");
      o.spec.template_name = v.value();
    } else if (Is(a, "--memory")) {
      auto v = value("--memory");
      if (!v.ok()) return v.status();
      auto n = ParseUint(v.value(), "--memory");
      if (!n.ok()) return n.status();
      o.spec.memory_bytes = n.value() << 20;
    } else if (a.starts_with("-") && a != "-") {
      return Status::Error("unknown option '" + a + "'");
    } else {
      break;  // the command starts here
    }
  }
  for (; i < args.size(); ++i) o.spec.argv.push_back(args[i]);
  if ((o.spec.shell ? 1 : 0) + (o.spec.code ? 1 : 0) + (o.spec.argv.empty() ? 0 : 1) > 1) {
    return Status::Error("give only one of --shell 'LINE', --python/--node/--bash 'CODE', or a command after --");
  }
  if (!o.spec.shell && !o.spec.code && o.spec.argv.empty()) {
    return Status::Error("no command: use -- CMD ARGS..., --shell 'LINE' or --python/--node/--bash 'CODE'");
  }
  if (stdin_file) {
    auto d = ReadFile(*stdin_file);
    if (!d.ok()) return d.status();
    o.spec.stdin_data = std::move(d).value();
  } else if (stdin_self) {
    auto d = read_stdin();
    if (!d.ok()) return d.status().Prefixed("--stdin");
    o.spec.stdin_data = std::move(d).value();
  }
  if (o.spec.id.empty()) {
    auto id = NewJobId();
    if (!id.ok()) return id.status();
    o.spec.id = std::move(id).value();
  }
  return o;
}

}  // namespace sandpool::cli
