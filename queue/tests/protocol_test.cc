#include "queue/protocol.h"

#include <gtest/gtest.h>
#include <msgpack.hpp>

#include <string>

namespace sandpool {

// Readable gtest output for error codes (found by ADL, so not in the anonymous namespace).
void PrintTo(ErrorCode c, std::ostream* os) { *os << ErrorCodeName(c); }

namespace {

// "83 a1 76" -> bytes; whitespace and newlines ignored.
std::string Hex(std::string_view text) {
  std::string out;
  int nibble = -1;
  for (char c : text) {
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) continue;
    if (nibble < 0) {
      nibble = v;
    } else {
      out += static_cast<char>(nibble * 16 + v);
      nibble = -1;
    }
  }
  return out;
}

std::string ToHex(std::string_view bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    if (!out.empty()) out += ' ';
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

const ServerLimits kLimits;

JobSpec MustDecode(std::string_view bytes, const ServerLimits& lim = kLimits) {
  auto r = DecodeJob(bytes, lim);
  if (auto* e = std::get_if<JobError>(&r)) {
    ADD_FAILURE() << "decode failed: " << ErrorCodeName(e->code) << ": " << e->message;
    return JobSpec{};
  }
  return std::get<JobSpec>(std::move(r));
}

std::optional<ErrorCode> DecodeError(std::string_view bytes, const ServerLimits& lim = kLimits) {
  auto r = DecodeJob(bytes, lim);
  if (auto* e = std::get_if<JobError>(&r)) return e->code;
  return std::nullopt;
}

// Builds a job map by hand so tests can put anything in it (wrong types, unknown fields).
class MapBuilder {
 public:
  MapBuilder& Str(std::string_view k, std::string_view v) {
    Key(k);
    P().pack_str(static_cast<uint32_t>(v.size()));
    P().pack_str_body(v.data(), static_cast<uint32_t>(v.size()));
    return *this;
  }
  MapBuilder& Bin(std::string_view k, std::string_view v) {
    Key(k);
    P().pack_bin(static_cast<uint32_t>(v.size()));
    P().pack_bin_body(v.data(), static_cast<uint32_t>(v.size()));
    return *this;
  }
  MapBuilder& Uint(std::string_view k, uint64_t v) {
    Key(k);
    P().pack_uint64(v);
    return *this;
  }
  MapBuilder& Int(std::string_view k, int64_t v) {
    Key(k);
    P().pack_int64(v);
    return *this;
  }
  MapBuilder& Nil(std::string_view k) {
    Key(k);
    P().pack_nil();
    return *this;
  }
  MapBuilder& Argv(std::string_view k, const std::vector<std::string>& a) {
    Key(k);
    P().pack(a);
    return *this;
  }
  MapBuilder& Env(std::string_view k, const std::vector<std::pair<std::string, std::string>>& e) {
    Key(k);
    P().pack_map(static_cast<uint32_t>(e.size()));
    for (const auto& [n, v] : e) {
      P().pack(n);
      P().pack(v);
    }
    return *this;
  }
  std::string Build() const {
    std::string out;
    Sink sink{&out};
    msgpack::packer<Sink>(sink).pack_map(n_);
    return out + body_;
  }

 private:
  struct Sink {
    std::string* s;
    void write(const char* p, size_t n) { s->append(p, n); }
  };
  msgpack::packer<Sink> P() { return msgpack::packer<Sink>(sink_); }
  void Key(std::string_view k) {
    ++n_;
    P().pack_str(static_cast<uint32_t>(k.size()));
    P().pack_str_body(k.data(), static_cast<uint32_t>(k.size()));
  }
  std::string body_;
  Sink sink_{&body_};
  uint32_t n_ = 0;
};

MapBuilder BaseJob(std::string_view id = "j1") {
  MapBuilder b;
  b.Uint("v", 1).Str("id", id);
  return b;
}

// ---- PROTOCOL.md section 11 ----------------------------------------------------------------

TEST(ProtocolVectors, ShellJobDecodes) {
  JobSpec s = MustDecode(Hex("83 a1 76 01 a2 69 64 a2 74 31 a5 73 68 65 6c 6c a7 65 63 68 6f 20 68 69"));
  EXPECT_EQ(s.id, "t1");
  ASSERT_TRUE(s.shell.has_value());
  EXPECT_EQ(*s.shell, "echo hi");
  EXPECT_TRUE(s.argv.empty());
  EXPECT_EQ(s.cwd, "/work");
  EXPECT_EQ(s.timeout_ms, 30000u);
  EXPECT_EQ(s.max_output_bytes, 1u << 20);
  EXPECT_EQ(s.retries, 0u);
  EXPECT_TRUE(s.env.empty());
  EXPECT_TRUE(s.stdin_data.empty());
}

const char kT2[] =
    "85 a1 76 01 a2 69 64 a2 74 32 a4 61 72 67 76 92 a9 2f 62 69 6e 2f 65 63"
    "68 6f a3 61 20 62 a3 65 6e 76 81 a1 58 a1 31 aa 74 69 6d 65 6f 75 74 5f"
    "6d 73 cd 13 88";

TEST(ProtocolVectors, ArgvJobDecodes) {
  JobSpec s = MustDecode(Hex(kT2));
  EXPECT_EQ(s.id, "t2");
  EXPECT_FALSE(s.shell.has_value());
  EXPECT_EQ(s.argv, (std::vector<std::string>{"/bin/echo", "a b"}));
  ASSERT_EQ(s.env.size(), 1u);
  EXPECT_EQ(s.env[0].first, "X");
  EXPECT_EQ(s.env[0].second, "1");
  EXPECT_EQ(s.timeout_ms, 5000u);
}

TEST(ProtocolVectors, ArgvJobEncodesToVector) {
  JobSpec s;
  s.id = "t2";
  s.argv = {"/bin/echo", "a b"};
  s.env = {{"X", "1"}};
  s.timeout_ms = 5000;
  EXPECT_EQ(ToHex(EncodeJobRequest(s, false)), ToHex(Hex(kT2)));
}

TEST(ProtocolVectors, Rejections) {
  EXPECT_EQ(DecodeError(Hex("c1")), ErrorCode::kBadPayload);
  EXPECT_EQ(DecodeError(Hex("93 01 02 03")), ErrorCode::kBadPayload);
  EXPECT_EQ(DecodeError(Hex("82 a1 76 05 a2 69 64 a2 74 36")), ErrorCode::kBadVersion);
  EXPECT_EQ(DecodeError(Hex("83 a1 76 01 a2 69 64 a2 74 34 a5 73 68 65 6c 6c 2a")),
            ErrorCode::kBadField);
  EXPECT_EQ(DecodeError(Hex("83 a1 76 01 a2 69 64 a2 74 35 a3 66 6f 6f c3")),
            ErrorCode::kBadField);
}

TEST(ProtocolVectors, StartedEventBytes) {
  EXPECT_EQ(ToHex(EncodeStartedEvent(0, "w", 1)),
            ToHex(Hex("85 a1 76 01 a4 74 79 70 65 a7 73 74 61 72 74 65 64 a3 73 65 71 00 a6 77"
                      "6f 72 6b 65 72 a1 77 a7 61 74 74 65 6d 70 74 01")));
}

// ---- payload-level errors ------------------------------------------------------------------

TEST(DecodeJob, PayloadErrors) {
  EXPECT_EQ(DecodeError(""), ErrorCode::kBadPayload);
  std::string good = Hex("83 a1 76 01 a2 69 64 a2 74 31 a5 73 68 65 6c 6c a7 65 63 68 6f 20 68 69");
  EXPECT_EQ(DecodeError(good + '\x00'), ErrorCode::kBadPayload) << "trailing byte";
  EXPECT_EQ(DecodeError(good.substr(0, good.size() - 1)), ErrorCode::kBadPayload) << "truncated";
  EXPECT_EQ(DecodeError(Hex("a3 61 62 63")), ErrorCode::kBadPayload) << "a string, not a map";
  EXPECT_EQ(DecodeError(Hex("80")), ErrorCode::kBadVersion) << "empty map: v missing";
}

TEST(DecodeJob, VersionRules) {
  EXPECT_EQ(DecodeError(MapBuilder().Str("id", "a").Str("shell", "x").Build()),
            ErrorCode::kBadVersion);
  EXPECT_EQ(DecodeError(MapBuilder().Str("v", "1").Str("id", "a").Str("shell", "x").Build()),
            ErrorCode::kBadVersion);
  EXPECT_EQ(DecodeError(MapBuilder().Int("v", -1).Str("id", "a").Str("shell", "x").Build()),
            ErrorCode::kBadVersion);
  EXPECT_EQ(DecodeError(MapBuilder().Uint("v", 0).Str("id", "a").Str("shell", "x").Build()),
            ErrorCode::kBadVersion);
  // v need not come first.
  JobSpec s = MustDecode(MapBuilder().Str("shell", "x").Str("id", "a").Uint("v", 1).Build());
  EXPECT_EQ(s.id, "a");
}

TEST(DecodeJob, RequiredAndExclusiveFields) {
  EXPECT_EQ(DecodeError(MapBuilder().Uint("v", 1).Str("shell", "x").Build()), ErrorCode::kBadField);
  EXPECT_EQ(DecodeError(BaseJob().Build()), ErrorCode::kBadField) << "no command";
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", "x").Argv("argv", {"a"}).Build()),
            ErrorCode::kBadField) << "both";
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", "x").Str("shell", "y").Build()),
            ErrorCode::kBadField) << "duplicate key";
  EXPECT_EQ(DecodeError(BaseJob().Argv("argv", {}).Build()), ErrorCode::kBadField);
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", "x").Str("cmd", "y").Build()), ErrorCode::kBadField);
}

TEST(DecodeJob, IdRules) {
  EXPECT_EQ(DecodeError(BaseJob("").Str("shell", "x").Build()), ErrorCode::kBadField);
  EXPECT_EQ(DecodeError(BaseJob("a b").Str("shell", "x").Build()), ErrorCode::kBadField);
  EXPECT_EQ(DecodeError(BaseJob("a/b").Str("shell", "x").Build()), ErrorCode::kBadField);
  EXPECT_EQ(DecodeError(BaseJob(std::string(129, 'a')).Str("shell", "x").Build()),
            ErrorCode::kBadField);
  EXPECT_EQ(MustDecode(BaseJob(std::string(128, 'a')).Str("shell", "x").Build()).id.size(), 128u);
  EXPECT_EQ(MustDecode(BaseJob("Az09._:-").Str("shell", "x").Build()).id, "Az09._:-");
  EXPECT_EQ(DecodeError(MapBuilder().Uint("v", 1).Uint("id", 5).Str("shell", "x").Build()),
            ErrorCode::kBadField);
  EXPECT_TRUE(ValidJobId("a"));
  EXPECT_FALSE(ValidJobId("é"));
}

TEST(DecodeJob, FieldTypes) {
  auto bad = [](MapBuilder b) { return DecodeError(b.Build()); };
  EXPECT_EQ(bad(BaseJob().Str("argv", "ls")), ErrorCode::kBadField);
  {
    // argv with an int element
    msgpack::sbuffer sb;
    msgpack::packer<msgpack::sbuffer> pk(&sb);
    pk.pack_map(3);
    pk.pack(std::string("v"));
    pk.pack(1);
    pk.pack(std::string("id"));
    pk.pack(std::string("x"));
    pk.pack(std::string("argv"));
    pk.pack_array(2);
    pk.pack(std::string("ls"));
    pk.pack(3);
    EXPECT_EQ(DecodeError(std::string(sb.data(), sb.size())), ErrorCode::kBadField);
  }
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Str("env", "A=1")), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Uint("cwd", 1)), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Uint("stdin", 1)), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Str("timeout_ms", "5")), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Int("timeout_ms", -5)), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Nil("timeout_ms")), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Int("max_output_bytes", -1)), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Str("retries", "1")), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Uint("queue", 1)), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Bin("shell", "x")), ErrorCode::kBadField) << "shell must be str";
  // An ext value anywhere is a type error.
  std::string ext = BaseJob().Str("shell", "x").Build();
  ext[0] = static_cast<char>(0x84);
  ext += Hex("a5 71 75 65 75 65 d4 01 00");  // "queue": fixext1
  EXPECT_EQ(DecodeError(ext), ErrorCode::kBadField);
}

TEST(DecodeJob, ValueRules) {
  auto bad = [](MapBuilder b) { return DecodeError(b.Build()); };
  EXPECT_EQ(bad(BaseJob().Str("shell", std::string("a\0b", 3))), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Argv("argv", {"ls", std::string("a\0b", 3)})), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Env("env", {{"1A", "x"}})), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Env("env", {{"A-B", "x"}})), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Env("env", {{"", "x"}})), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Env("env", {{"A=B", "x"}})), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Env("env", {{"A", std::string("\0", 1)}})),
            ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Env("env", {{"A", "1"}, {"A", "2"}})),
            ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Str("cwd", "work")), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Str("cwd", "")), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Str("cwd", std::string("/a\0", 3))),
            ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Str("cwd", "/" + std::string(4096, 'a'))),
            ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Uint("timeout_ms", 0)), ErrorCode::kBadField);
  EXPECT_EQ(bad(BaseJob().Str("shell", "x").Uint("retries", 6)), ErrorCode::kBadField);

  JobSpec s = MustDecode(BaseJob()
                             .Str("shell", "x")
                             .Env("env", {{"_a1", ""}, {"B", "x=y"}})
                             .Str("cwd", "/tmp")
                             .Uint("retries", 5)
                             .Str("queue", "other")
                             .Build());
  ASSERT_EQ(s.env.size(), 2u);
  EXPECT_EQ(s.env[0].first, "_a1");
  EXPECT_EQ(s.env[1].second, "x=y");
  EXPECT_EQ(s.cwd, "/tmp");
  EXPECT_EQ(s.retries, 5u);
}

TEST(DecodeJob, StdinAcceptsBinAndStr) {
  std::string data("\x00\xff\x01", 3);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "cat").Bin("stdin", data).Build()).stdin_data, data);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "cat").Str("stdin", "hello").Build()).stdin_data,
            "hello");
}

TEST(DecodeJob, Clamping) {
  ServerLimits lim;
  lim.max_timeout_ms = 1000;
  lim.default_timeout_ms = 700;
  lim.max_output_bytes = 100;
  lim.default_output_bytes = 50;
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Uint("timeout_ms", 999999999999).Build(), lim)
                .timeout_ms, 1000u);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Uint("timeout_ms", 1).Build(), lim).timeout_ms,
            1u);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Build(), lim).timeout_ms, 700u);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Uint("max_output_bytes", 101).Build(), lim)
                .max_output_bytes, 100u);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Uint("max_output_bytes", 0).Build(), lim)
                .max_output_bytes, 0u);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Build(), lim).max_output_bytes, 50u);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Uint("timeout_ms", UINT64_MAX).Build(), lim)
                .timeout_ms, 1000u);
}

// ---- limits: each one just at and just past its bound ---------------------------------------

TEST(DecodeJobLimits, ArgvItems) {
  ServerLimits lim;
  lim.max_argv_items = 10;
  EXPECT_EQ(MustDecode(BaseJob().Argv("argv", std::vector<std::string>(10, "a")).Build(), lim)
                .argv.size(), 10u);
  EXPECT_EQ(DecodeError(BaseJob().Argv("argv", std::vector<std::string>(11, "a")).Build(), lim),
            ErrorCode::kTooLarge);
  EXPECT_EQ(DecodeError(BaseJob().Argv("argv", std::vector<std::string>(500, "a")).Build(), lim),
            ErrorCode::kTooLarge) << "past the parser's own bound";
  // Default limit: 4096.
  EXPECT_EQ(DecodeError(BaseJob().Argv("argv", std::vector<std::string>(4097, "a")).Build()),
            ErrorCode::kTooLarge);
  EXPECT_EQ(MustDecode(BaseJob().Argv("argv", std::vector<std::string>(4096, "a")).Build())
                .argv.size(), 4096u);
}

TEST(DecodeJobLimits, ArgvAndShellBytes) {
  ServerLimits lim;
  lim.max_argv_bytes = 100;
  EXPECT_TRUE(std::holds_alternative<JobSpec>(
      DecodeJob(BaseJob().Argv("argv", {std::string(50, 'a'), std::string(50, 'b')}).Build(), lim)));
  EXPECT_EQ(DecodeError(BaseJob().Argv("argv", {std::string(50, 'a'), std::string(51, 'b')}).Build(),
                        lim),
            ErrorCode::kTooLarge);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", std::string(100, 'x')).Build(), lim).shell->size(),
            100u);
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", std::string(101, 'x')).Build(), lim),
            ErrorCode::kTooLarge);
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", std::string((1 << 20) + 1, 'x')).Build()),
            ErrorCode::kTooLarge);
}

TEST(DecodeJobLimits, Env) {
  ServerLimits lim;
  lim.max_env_items = 3;
  lim.max_env_bytes = 20;
  std::vector<std::pair<std::string, std::string>> env = {{"A", "1"}, {"B", "2"}, {"C", "3"}};
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Env("env", env).Build(), lim).env.size(), 3u);
  env.push_back({"D", "4"});
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", "x").Env("env", env).Build(), lim),
            ErrorCode::kTooLarge);
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Env("env", {{"A", std::string(19, 'v')}}).Build(),
                       lim).env.size(), 1u);
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", "x").Env("env", {{"A", std::string(20, 'v')}}).Build(),
                        lim),
            ErrorCode::kTooLarge);
}

TEST(DecodeJobLimits, Stdin) {
  ServerLimits lim;
  lim.max_stdin_bytes = 64;
  EXPECT_EQ(MustDecode(BaseJob().Str("shell", "x").Bin("stdin", std::string(64, 's')).Build(), lim)
                .stdin_data.size(), 64u);
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", "x").Bin("stdin", std::string(65, 's')).Build(), lim),
            ErrorCode::kTooLarge);
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", "x").Str("stdin", std::string(65, 's')).Build(), lim),
            ErrorCode::kTooLarge);
  EXPECT_EQ(DecodeError(BaseJob().Str("shell", "x").Bin("stdin", std::string(1000, 's')).Build(), lim),
            ErrorCode::kTooLarge) << "past the parser's own bound";
}

TEST(DecodeJobLimits, HugeDeclaredSizesDoNotAllocate) {
  // Headers that claim 4 GiB strings / arrays / maps with no body: rejected cheaply. Containers
  // hit the count bound; strings are found truncated before their size is even considered.
  EXPECT_EQ(DecodeError(Hex("81 a1 76 dd ff ff ff ff")), ErrorCode::kTooLarge);
  EXPECT_EQ(DecodeError(Hex("df ff ff ff ff")), ErrorCode::kTooLarge);
  EXPECT_EQ(DecodeError(Hex("81 a1 76 db ff ff ff ff")), ErrorCode::kBadPayload);
  EXPECT_EQ(DecodeError(Hex("81 a1 76 c6 ff ff ff ff")), ErrorCode::kBadPayload);
  // A real body just past the parser's string bound (largest limit + 1).
  std::string big = BaseJob().Str("shell", "x").Build();
  big[0] = static_cast<char>(0x84);
  big += Hex("a5 73 74 64 69 6e c6 01 00 00 02") + std::string((16 << 20) + 2, 'b');
  EXPECT_EQ(DecodeError(big), ErrorCode::kTooLarge);
  // Deep nesting is refused before it costs stack.
  std::string deep = Hex("81 a1 71") + std::string(100000, '\x91') + '\x01';
  EXPECT_EQ(DecodeError(deep), ErrorCode::kBadField);
}

// ---- round trips ------------------------------------------------------------------------------

TEST(RoundTrip, Job) {
  JobSpec s;
  s.id = "job-42";
  s.argv = {"/bin/sh", "-c", "echo $A", std::string("h\xc3\xa9")};
  s.env = {{"A", "1"}, {"B_2", ""}};
  s.cwd = "/work/sub";
  s.stdin_data = std::string("in\0put", 6);
  s.timeout_ms = 1234;
  s.max_output_bytes = 0;
  s.retries = 2;
  JobSpec d = MustDecode(EncodeJob(s));
  EXPECT_EQ(d.id, s.id);
  EXPECT_EQ(d.argv, s.argv);
  EXPECT_FALSE(d.shell.has_value());
  EXPECT_EQ(d.env, s.env);
  EXPECT_EQ(d.cwd, s.cwd);
  EXPECT_EQ(d.stdin_data, s.stdin_data);
  EXPECT_EQ(d.timeout_ms, 1234u);
  EXPECT_EQ(d.max_output_bytes, 0u);
  EXPECT_EQ(d.retries, 2u);

  JobSpec sh;
  sh.id = "x";
  sh.shell = "true";
  JobSpec d2 = MustDecode(EncodeJobRequest(sh, false));
  EXPECT_EQ(d2.shell, "true");
  EXPECT_EQ(d2.timeout_ms, 30000u) << "server default applies";
  EXPECT_EQ(d2.max_output_bytes, 1u << 20) << "server default applies";
}

JobResult SampleResult() {
  JobResult r;
  r.id = "r1";
  r.outcome = Outcome::kSignal;
  r.signal = 9;
  r.timed_out = true;
  r.killed = true;
  r.stdout_data = std::string("out\0\xff", 5);
  r.stderr_data = "err";
  r.stdout_truncated = true;
  r.stderr_dropped_bytes = 77;
  r.stdout_dropped_bytes = 1ull << 40;
  r.exec_time_us = 5;
  r.cpu_time_us = 6;
  r.peak_memory_bytes = 7;
  r.queue_wait_us = 8;
  r.worker = "host-1";
  r.attempt = 2;
  r.error = JobError{ErrorCode::kShutdown, "bye"};
  return r;
}

void ExpectSameResult(const JobResult& a, const JobResult& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.outcome, b.outcome);
  EXPECT_EQ(a.exit_code, b.exit_code);
  EXPECT_EQ(a.signal, b.signal);
  EXPECT_EQ(a.timed_out, b.timed_out);
  EXPECT_EQ(a.killed, b.killed);
  EXPECT_EQ(a.stdout_data, b.stdout_data);
  EXPECT_EQ(a.stderr_data, b.stderr_data);
  EXPECT_EQ(a.stdout_truncated, b.stdout_truncated);
  EXPECT_EQ(a.stderr_truncated, b.stderr_truncated);
  EXPECT_EQ(a.stdout_dropped_bytes, b.stdout_dropped_bytes);
  EXPECT_EQ(a.stderr_dropped_bytes, b.stderr_dropped_bytes);
  EXPECT_EQ(a.exec_time_us, b.exec_time_us);
  EXPECT_EQ(a.cpu_time_us, b.cpu_time_us);
  EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes);
  EXPECT_EQ(a.queue_wait_us, b.queue_wait_us);
  EXPECT_EQ(a.worker, b.worker);
  EXPECT_EQ(a.attempt, b.attempt);
  ASSERT_EQ(a.error.has_value(), b.error.has_value());
  if (a.error) {
    EXPECT_EQ(a.error->code, b.error->code);
    EXPECT_EQ(a.error->message, b.error->message);
  }
}

TEST(RoundTrip, Result) {
  JobResult r = SampleResult();
  auto d = DecodeResult(EncodeResult(r));
  ASSERT_TRUE(d.has_value());
  ExpectSameResult(r, *d);

  JobResult e;
  e.id = "e";
  e.outcome = Outcome::kExit;
  e.exit_code = -3;
  auto d2 = DecodeResult(EncodeResult(e));
  ASSERT_TRUE(d2.has_value());
  ExpectSameResult(e, *d2);
}

// The result map has exactly the field names of section 5, byte fields as bin, nil optionals.
TEST(EncodeResult, Schema) {
  JobResult r;
  r.id = "x";
  r.outcome = Outcome::kExit;
  r.exit_code = 0;
  r.stdout_data = "o";
  std::string bytes = EncodeResult(r);
  msgpack::object_handle oh = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& o = oh.get();
  ASSERT_EQ(o.type, msgpack::type::MAP);
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    std::string k = kv.key.as<std::string>();
    keys.push_back(k);
    if (k == "stdout" || k == "stderr") {
      EXPECT_EQ(kv.val.type, msgpack::type::BIN) << k;
    }
    if (k == "signal" || k == "error") {
      EXPECT_EQ(kv.val.type, msgpack::type::NIL) << k;
    }
    if (k == "exit_code") {
      EXPECT_EQ(kv.val.type, msgpack::type::POSITIVE_INTEGER);
    }
    if (k == "outcome") {
      EXPECT_EQ(kv.val.as<std::string>(), "exit");
    }
    if (k == "v") {
      EXPECT_EQ(kv.val.as<int>(), 1);
    }
  }
  EXPECT_EQ(keys, (std::vector<std::string>{
                      "v", "id", "outcome", "exit_code", "signal", "timed_out", "killed",
                      "stdout", "stderr", "stdout_truncated", "stderr_truncated",
                      "stdout_dropped_bytes", "stderr_dropped_bytes", "exec_time_us",
                      "cpu_time_us", "peak_memory_bytes", "queue_wait_us", "worker", "attempt",
                      "error"}));

  r.error = JobError{ErrorCode::kWorkerLost, "gone"};
  bytes = EncodeResult(r);
  oh = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& err = oh.get().via.map.ptr[19].val;
  ASSERT_EQ(err.type, msgpack::type::MAP);
  ASSERT_EQ(err.via.map.size, 3u);
  EXPECT_EQ(err.via.map.ptr[0].key.as<std::string>(), "code");
  EXPECT_EQ(err.via.map.ptr[0].val.as<std::string>(), "worker_lost");
  EXPECT_EQ(err.via.map.ptr[1].val.as<std::string>(), "gone");
  EXPECT_EQ(err.via.map.ptr[2].key.as<std::string>(), "retryable");
  EXPECT_TRUE(err.via.map.ptr[2].val.as<bool>());
}

TEST(DecodeResult, TolerantOfUnknownFieldsAndStrBytes) {
  MapBuilder b;
  b.Uint("v", 2).Str("id", "z").Str("outcome", "exit").Int("exit_code", 3).Str("stdout", "text")
      .Uint("future_field", 9).Argv("another", {"x"});
  auto r = DecodeResult(b.Build());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->stdout_data, "text");

  // An outcome from a newer version is reported as an error, not dropped.
  MapBuilder n;
  n.Uint("v", 1).Str("id", "z").Str("outcome", "quantum");
  auto q = DecodeResult(n.Build());
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->outcome, Outcome::kError);
  ASSERT_TRUE(q->error.has_value());
  EXPECT_NE(q->error->message.find("quantum"), std::string::npos);
}

TEST(DecodeResult, Rejects) {
  EXPECT_FALSE(DecodeResult("").has_value());
  EXPECT_FALSE(DecodeResult(Hex("93 01 02 03")).has_value());
  EXPECT_FALSE(DecodeResult(MapBuilder().Str("id", "z").Str("outcome", "exit").Build()).has_value());
  EXPECT_FALSE(DecodeResult(MapBuilder().Uint("v", 1).Str("outcome", "exit").Build()).has_value());
  EXPECT_FALSE(DecodeResult(
      MapBuilder().Uint("v", 1).Str("id", "z").Str("outcome", "exit").Str("exit_code", "0").Build())
                   .has_value());
  std::string ok = EncodeResult(SampleResult());
  EXPECT_TRUE(DecodeResult(ok).has_value());
  EXPECT_FALSE(DecodeResult(ok + "x").has_value());
}

TEST(Events, RoundTrip) {
  auto s = DecodeEvent(EncodeStartedEvent(0, "w", 1));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->type, "started");
  EXPECT_EQ(s->seq, 0u);
  EXPECT_EQ(s->worker, "w");
  EXPECT_EQ(s->attempt, 1u);

  std::string data(70000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  std::string out_ev = EncodeOutputEvent(5, "stderr", data);
  // data is bin: "data" key then c6 (bin32) since 70000 > 65535
  EXPECT_NE(out_ev.find(std::string("\xa4" "data\xc6", 6)), std::string::npos);
  auto o = DecodeEvent(out_ev);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->type, "stderr");
  EXPECT_EQ(o->seq, 5u);
  EXPECT_EQ(o->data, data);

  JobResult r = SampleResult();
  auto e = DecodeEvent(EncodeExitedEvent(9, r));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->type, "exited");
  EXPECT_EQ(e->seq, 9u);
  ASSERT_TRUE(e->result.has_value());
  ExpectSameResult(r, *e->result);
}

TEST(Events, TolerantAndStrict) {
  // Unknown types and fields pass through.
  auto u = DecodeEvent(MapBuilder().Uint("v", 1).Str("type", "progress").Uint("seq", 3)
                           .Uint("pct", 50).Build());
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->type, "progress");
  // Missing seq / data / result are errors.
  EXPECT_FALSE(DecodeEvent(MapBuilder().Uint("v", 1).Str("type", "stdout").Str("data", "x").Build()));
  EXPECT_FALSE(DecodeEvent(MapBuilder().Uint("v", 1).Str("type", "stdout").Uint("seq", 1).Build()));
  EXPECT_FALSE(DecodeEvent(MapBuilder().Uint("v", 1).Str("type", "exited").Uint("seq", 1).Build()));
  // str data accepted
  auto s = DecodeEvent(MapBuilder().Uint("v", 1).Str("type", "stdout").Uint("seq", 1)
                           .Str("data", "hi").Build());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->data, "hi");
}

// ---- names and exit codes ------------------------------------------------------------------------

TEST(Names, ErrorCodesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(ErrorCode::kInternal); ++i) {
    auto c = static_cast<ErrorCode>(i);
    EXPECT_EQ(ParseErrorCode(ErrorCodeName(c)), c);
  }
  EXPECT_EQ(ErrorCodeName(ErrorCode::kBadPayload), "bad_payload");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kSandboxFailed), "sandbox_failed");
  EXPECT_FALSE(ParseErrorCode("nope").has_value());
  EXPECT_FALSE(ErrorCodeRetryable(ErrorCode::kBadField));
  EXPECT_FALSE(ErrorCodeRetryable(ErrorCode::kExecFailed));
  EXPECT_FALSE(ErrorCodeRetryable(ErrorCode::kCancelled));
  EXPECT_TRUE(ErrorCodeRetryable(ErrorCode::kWorkerLost));
  EXPECT_TRUE(ErrorCodeRetryable(ErrorCode::kInternal));
}

TEST(Names, OutcomesRoundTrip) {
  for (int i = 0; i < kOutcomeCount; ++i) {
    auto o = static_cast<Outcome>(i);
    EXPECT_EQ(ParseOutcome(OutcomeName(o)), o);
  }
  EXPECT_EQ(OutcomeName(Outcome::kOutputLimit), "output_limit");
  EXPECT_FALSE(ParseOutcome("Exit").has_value());
}

TEST(CliExitCode, Table) {
  EXPECT_EQ(CliExitCode(Outcome::kExit, 0, std::nullopt), 0);
  EXPECT_EQ(CliExitCode(Outcome::kExit, 3, std::nullopt), 3);
  EXPECT_EQ(CliExitCode(Outcome::kSignal, std::nullopt, 9), 137);
  EXPECT_EQ(CliExitCode(Outcome::kSignal, std::nullopt, 15), 143);
  EXPECT_EQ(CliExitCode(Outcome::kTimeout, std::nullopt, 9), 124);
  EXPECT_EQ(CliExitCode(Outcome::kCancelled, std::nullopt, 9), 130);
  EXPECT_EQ(CliExitCode(Outcome::kOutputLimit, std::nullopt, 9), 137);
  EXPECT_EQ(CliExitCode(Outcome::kMemoryLimit, std::nullopt, 9), 137);
  EXPECT_EQ(CliExitCode(Outcome::kPidsLimit, 1, std::nullopt), 1);
  EXPECT_EQ(CliExitCode(Outcome::kPidsLimit, std::nullopt, 9), 137);
  EXPECT_EQ(CliExitCode(Outcome::kCpuLimit, std::nullopt, 9), 137);
  EXPECT_EQ(CliExitCode(Outcome::kDiskLimit, 2, std::nullopt), 2);
  EXPECT_EQ(CliExitCode(Outcome::kSeccomp, std::nullopt, 31), 159);
  EXPECT_EQ(CliExitCode(Outcome::kWorkerLost, std::nullopt, std::nullopt), 125);
  EXPECT_EQ(CliExitCode(Outcome::kError, 127, std::nullopt), 127);  // exec_failed
  EXPECT_EQ(CliExitCode(Outcome::kError, std::nullopt, std::nullopt), 125);
}

TEST(JobLimits, PerJobLimitsAreClampedToTheServerRange) {
  ServerLimits lim;
  lim.max_memory_bytes = 256ull << 20;
  lim.max_pids = 100;
  lim.max_cpu_time_ms = 5000;
  JobSpec spec;
  spec.id = "lim1";
  spec.shell = "true";
  spec.memory_bytes = 1ull << 40;  // far above the maximum
  spec.pids = 1;                   // below the floor
  spec.cpu_time_ms = 60000;
  auto d = DecodeJob(EncodeJob(spec), lim);
  ASSERT_TRUE(std::holds_alternative<JobSpec>(d)) << std::get<JobError>(d).message;
  const JobSpec& got = std::get<JobSpec>(d);
  EXPECT_EQ(got.memory_bytes, 256ull << 20);
  EXPECT_EQ(got.pids, lim.min_pids);
  EXPECT_EQ(got.cpu_time_ms, 5000u);
  spec.memory_bytes = 1;
  EXPECT_EQ(std::get<JobSpec>(DecodeJob(EncodeJob(spec), lim)).memory_bytes, lim.min_memory_bytes);
}

TEST(JobLimits, ZeroAndWrongTypesAreRejected) {
  ServerLimits lim;
  // {"v":1,"id":"z","shell":"x","pids":0}
  const std::string zero_pids("\x84\xa1v\x01\xa2id\xa1z\xa5shell\xa1x\xa4pids\x00", 23);
  auto d = DecodeJob(zero_pids, lim);
  ASSERT_TRUE(std::holds_alternative<JobError>(d));
  EXPECT_EQ(std::get<JobError>(d).code, ErrorCode::kBadField);
  // {"v":1,"id":"z","shell":"x","memory_bytes":"lots"}
  const std::string str_mem("\x84\xa1v\x01\xa2id\xa1z\xa5shell\xa1x\xacmemory_bytes\xa4lots", 35);
  auto e = DecodeJob(str_mem, lim);
  ASSERT_TRUE(std::holds_alternative<JobError>(e));
  EXPECT_EQ(std::get<JobError>(e).code, ErrorCode::kBadField);
}

TEST(JobText, NonUtf8TextIsRejected) {
  ServerLimits lim;
  JobSpec spec;
  spec.id = "u1";
  spec.argv = {"/usr/bin/printf", std::string("a\xff" "b")};
  auto d = DecodeJob(EncodeJob(spec), lim);
  ASSERT_TRUE(std::holds_alternative<JobError>(d));
  EXPECT_EQ(std::get<JobError>(d).code, ErrorCode::kBadField);
  EXPECT_NE(std::get<JobError>(d).message.find("UTF-8"), std::string::npos);
  for (const std::string& bad : {std::string("\xc0\xaf"), std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80"),
                                std::string("\xe2\x82")}) {
    spec.argv = {"x", bad};
    EXPECT_TRUE(std::holds_alternative<JobError>(DecodeJob(EncodeJob(spec), lim))) << bad.size();
  }
  spec.argv = {"x", "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"};  // é, €, emoji
  EXPECT_TRUE(std::holds_alternative<JobSpec>(DecodeJob(EncodeJob(spec), lim)));
}

TEST(Egress, Version3JobsNarrowAndResultsShowThePolicy) {
  ServerLimits lim;
  JobSpec spec;
  spec.version = 3;
  spec.id = "e1";
  spec.shell = "true";
  spec.egress = EgressRequest{std::vector<std::string>{"Registry.NPMjs.org:443,80", "10.0.0.0/8"}, {"evil.example"}};
  auto d = DecodeJob(EncodeJob(spec), lim);
  ASSERT_TRUE(std::holds_alternative<JobSpec>(d)) << std::get<JobError>(d).message;
  const JobSpec& got = std::get<JobSpec>(d);
  ASSERT_TRUE(got.egress && got.egress->allow);
  EXPECT_EQ(*got.egress->allow, (std::vector<std::string>{"registry.npmjs.org:80,443", "10.0.0.0/8"}));  // canonical
  EXPECT_EQ(got.egress->deny, std::vector<std::string>{"evil.example"});
  // Only in version 3 maps; and bad rules are bad_field naming the rule.
  spec.version = 1;
  auto v1 = DecodeJob(EncodeJob(spec), lim);
  ASSERT_TRUE(std::holds_alternative<JobError>(v1));
  EXPECT_NE(std::get<JobError>(v1).message.find("version 3"), std::string::npos);
  spec.version = 3;
  spec.egress->allow = std::vector<std::string>{"10.1.2.3/8"};
  auto bad = DecodeJob(EncodeJob(spec), lim);
  ASSERT_TRUE(std::holds_alternative<JobError>(bad));
  EXPECT_EQ(std::get<JobError>(bad).code, ErrorCode::kBadField);
  EXPECT_NE(std::get<JobError>(bad).message.find("host bits"), std::string::npos);

  JobResult r;
  r.id = "e1";
  auto plain = DecodeResult(EncodeResult(r));
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->network);  // no network: no field at all
  r.network = NetworkInfo{{"registry.npmjs.org:443"}, {"evil.example"}};
  auto with = DecodeResult(EncodeResult(r));
  ASSERT_TRUE(with && with->network);
  EXPECT_EQ(*with->network, *r.network);
}

TEST(EntryNotify, Targets) {
  auto target = [](const char* n, const char* r, bool hn, bool hr) { return EntryNotifyTarget(n, r, hn, hr); };
  EXPECT_EQ(std::get<std::string>(target("", "", false, false)), "");
  EXPECT_EQ(std::get<std::string>(target("batch-1", "", true, false)), "batch-1");
  EXPECT_EQ(std::get<std::string>(target("batch-1", "1", true, true)), "batch-1!");
  EXPECT_EQ(std::get<std::string>(target("batch-1", "0", true, true)), "batch-1");
  for (auto bad : {target("", "", true, false), target("a b", "", true, false), target("x!", "", true, false),
                   target(std::string(129, 'a').c_str(), "", true, false), target("b", "yes", true, true),
                   target("", "1", false, true)}) {
    ASSERT_TRUE(std::holds_alternative<JobError>(bad));
    EXPECT_EQ(std::get<JobError>(bad).code, ErrorCode::kBadField);
  }
}

TEST(EntryNotify, Version4JobMapsDecode) {
  JobSpec spec;
  spec.version = 4;
  spec.id = "n1";
  spec.shell = "true";
  auto decoded = DecodeJob(EncodeJob(spec), ServerLimits{});
  ASSERT_TRUE(std::holds_alternative<JobSpec>(decoded));
  EXPECT_EQ(std::get<JobSpec>(decoded).version, 4u);
}

}  // namespace
}  // namespace sandpool
