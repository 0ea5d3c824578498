#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>

namespace sandpool {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
char g_component[32] = "sandpool";

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}

}  // namespace

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool ParseLogLevel(std::string_view s, LogLevel* out) {
  if (s == "debug") *out = LogLevel::kDebug;
  else if (s == "info") *out = LogLevel::kInfo;
  else if (s == "warn") *out = LogLevel::kWarn;
  else if (s == "error") *out = LogLevel::kError;
  else return false;
  return true;
}

void SetLogComponent(std::string_view name) {
  size_t n = std::min(name.size(), sizeof(g_component) - 1);
  name.copy(g_component, n);
  g_component[n] = '\0';
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

void AppendJsonString(std::string& out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (c < 0x20 || c == 0x7f || c >= 0x80) {
      // Pass valid UTF-8 sequences through; escape everything else byte by byte.
      size_t len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
      bool valid = len > 0 && i + len <= s.size();
      for (size_t j = 1; valid && j < len; ++j) {
        valid = (static_cast<unsigned char>(s[i + j]) & 0xc0) == 0x80;
      }
      if (valid) {
        out.append(s.substr(i, len));
        i += len - 1;
        continue;
      }
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      continue;
    }
    out += static_cast<char>(c);
  }
  out += '"';
}

void Log(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields) {
  if (!LogEnabled(level)) return;
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char ts[64];
  snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(tv.tv_usec / 1000));
  std::string line;
  line.reserve(128);
  line += "{\"ts\":\"";
  line += ts;
  line += "\",\"level\":\"";
  line += LevelName(level);
  line += "\",\"component\":";
  AppendJsonString(line, g_component);
  line += ",\"msg\":";
  AppendJsonString(line, msg);
  for (const LogField& f : fields) {
    line += ',';
    AppendJsonString(line, f.key);
    line += ':';
    if (auto* s = std::get_if<std::string>(&f.value)) {
      AppendJsonString(line, *s);
    } else if (auto* i = std::get_if<int64_t>(&f.value)) {
      line += std::to_string(*i);
    } else if (auto* d = std::get_if<double>(&f.value)) {
      char buf[32];
      snprintf(buf, sizeof buf, "%.6g", *d);
      line += buf;
    } else {
      line += std::get<bool>(f.value) ? "true" : "false";
    }
  }
  line += "}\n";
  // One write per line so concurrent writers (daemon, keepers) do not interleave lines.
  ssize_t r = ::write(STDERR_FILENO, line.data(), line.size());
  (void)r;
}

}  // namespace sandpool
