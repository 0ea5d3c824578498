// Structured logs: one JSON object per line on stderr, e.g.
//   {"ts":"2026-11-22T01:02:03.456Z","level":"info","msg":"job done","job":"a1","outcome":"exit"}
// Log(...) is cheap when the level is filtered out. Not async-signal-safe: never call it between
// fork and exec or from a signal handler. Thread-safe (one write(2) per line).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>

namespace sandpool {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

struct LogField {
  LogField(std::string_view k, std::string_view v) : key(k), value(std::string(v)) {}
  LogField(std::string_view k, const char* v) : key(k), value(std::string(v)) {}
  LogField(std::string_view k, const std::string& v) : key(k), value(v) {}
  LogField(std::string_view k, int64_t v) : key(k), value(v) {}
  LogField(std::string_view k, int v) : key(k), value(int64_t{v}) {}
  LogField(std::string_view k, unsigned v) : key(k), value(int64_t{v}) {}
  LogField(std::string_view k, uint64_t v) : key(k), value(static_cast<int64_t>(v)) {}
  LogField(std::string_view k, double v) : key(k), value(v) {}
  LogField(std::string_view k, bool v) : key(k), value(v) {}
  std::string_view key;
  std::variant<std::string, int64_t, double, bool> value;
};

void SetLogLevel(LogLevel level);
// Parses "debug", "info", "warn" or "error"; returns false for anything else.
bool ParseLogLevel(std::string_view s, LogLevel* out);
// Every line also carries "component":<name> (e.g. "sandpoold", "keeper").
void SetLogComponent(std::string_view name);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, std::string_view msg, std::initializer_list<LogField> fields = {});

inline void LogDebug(std::string_view m, std::initializer_list<LogField> f = {}) { Log(LogLevel::kDebug, m, f); }
inline void LogInfo(std::string_view m, std::initializer_list<LogField> f = {}) { Log(LogLevel::kInfo, m, f); }
inline void LogWarn(std::string_view m, std::initializer_list<LogField> f = {}) { Log(LogLevel::kWarn, m, f); }
inline void LogError(std::string_view m, std::initializer_list<LogField> f = {}) { Log(LogLevel::kError, m, f); }

// Appends `s` to `out` as a JSON string literal (with quotes); invalid UTF-8 bytes become \u00XX.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace sandpool
