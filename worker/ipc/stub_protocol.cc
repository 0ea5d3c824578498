#include "worker/ipc/stub_protocol.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace sandpool {

StubReport ParseStubReport(std::string_view said) {
  StubReport r;
  for (size_t i = 0; i < said.size(); ++i) {
    if (said[i] == kStubStarting) {
      r.starting = true;
    } else if (said[i] == 'E') {
      size_t end = said.find('\n', i);
      std::string rec(said.substr(i + 1, end == std::string_view::npos ? std::string_view::npos : end - i - 1));
      r.error = std::atoi(rec.c_str());
      if (r.error <= 0) r.error = ENOENT;
      size_t sp = rec.find(' ');
      r.stage = sp == std::string::npos ? "exec" : rec.substr(sp + 1);
      if (r.stage.empty()) r.stage = "exec";
      return r;  // the first failure is the one that counts
    }
  }
  return r;
}

size_t FormatStubFailure(char* buf, int err, const char* stage) {
  size_t n = 0;
  buf[n++] = 'E';
  char digits[12];
  size_t d = 0;
  unsigned v = err > 0 ? static_cast<unsigned>(err) : 0;
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && d < sizeof digits);
  while (d > 0) buf[n++] = digits[--d];
  buf[n++] = ' ';
  for (const char* p = stage; *p != '\0' && n < 46; ++p) buf[n++] = *p;
  buf[n++] = '\n';
  return n;
}

std::string EncodeExecImage(const RunMsg& run, std::string_view default_path) {
  ExecImageHeader h{};
  h.magic = kExecImageMagic;
  h.argc = static_cast<uint32_t>(run.argv.size());
  h.envc = static_cast<uint32_t>(run.env.size());
  h.cpu_time_ms = run.cpu_time_ms;
  h.file_size_bytes = run.file_size_bytes;
  h.open_files = run.open_files;
  std::string strings;
  auto add = [&](std::string_view s) {
    strings.append(s);
    strings.push_back('\0');
  };
  add(run.cwd.empty() ? "/work" : run.cwd);
  for (const std::string& a : run.argv) add(a);
  for (const std::string& e : run.env) add(e);
  // The PATH search execvp would do, as a list of paths to try.
  const std::string& prog = run.argv.empty() ? std::string() : run.argv[0];
  if (prog.find('/') != std::string::npos) {
    add(prog);
    h.candidates = 1;
  } else if (!prog.empty()) {
    std::string_view path = default_path;
    for (const std::string& e : run.env) {
      if (e.rfind("PATH=", 0) == 0) path = std::string_view(e).substr(5);
    }
    size_t start = 0;
    while (start <= path.size()) {
      size_t end = path.find(':', start);
      if (end == std::string_view::npos) end = path.size();
      std::string_view dir = path.substr(start, end - start);
      add(std::string(dir.empty() ? "." : dir) + "/" + prog);
      ++h.candidates;
      start = end + 1;
    }
  }
  std::string out(sizeof(uint32_t), '\0');
  uint32_t len = static_cast<uint32_t>(sizeof h + strings.size());
  std::memcpy(out.data(), &len, sizeof len);
  out.append(reinterpret_cast<const char*>(&h), sizeof h);
  out += strings;
  return out;
}

bool MapExecImage(char* body, size_t len, char** ptrs, size_t nptrs, ExecImage* out) {
  if (len < sizeof(ExecImageHeader)) return false;
  const auto* h = reinterpret_cast<const ExecImageHeader*>(body);
  if (h->magic != kExecImageMagic || h->argc == 0 || h->argc > kMaxExecImageStrings ||
      h->envc > kMaxExecImageStrings || h->candidates == 0 || h->candidates > kMaxExecImageStrings ||
      size_t{h->argc} + h->envc + 3 > nptrs) {
    return false;
  }
  char* p = body + sizeof(ExecImageHeader);
  char* end = body + len;
  // Each string must end inside the body.
  auto next = [&](char** s) {
    if (p >= end) return false;
    void* nul = std::memchr(p, '\0', static_cast<size_t>(end - p));
    if (nul == nullptr) return false;
    *s = p;
    p = static_cast<char*>(nul) + 1;
    return true;
  };
  char* cwd = nullptr;
  if (!next(&cwd)) return false;
  char** argv = ptrs + 1;  // ptrs[0]: the spare slot
  for (uint32_t i = 0; i < h->argc; ++i) {
    if (!next(&argv[i])) return false;
  }
  argv[h->argc] = nullptr;
  char** envp = argv + h->argc + 1;
  for (uint32_t i = 0; i < h->envc; ++i) {
    if (!next(&envp[i])) return false;
  }
  envp[h->envc] = nullptr;
  char* candidates = p;
  for (uint32_t i = 0; i < h->candidates; ++i) {
    char* c = nullptr;
    if (!next(&c)) return false;
  }
  out->header = h;
  out->cwd = cwd;
  out->argv = argv;
  out->envp = envp;
  out->candidates = candidates;
  return true;
}

void EncodeInitReport(const InitReport& r, char* buf) {
  buf[0] = 'S';
  std::memcpy(buf + 1, &r, sizeof r);
}

bool DecodeInitReport(std::string_view said, InitReport* r) {
  if (said.size() < kInitReportSize || said[0] != 'S') return false;
  std::memcpy(r, said.data() + 1, sizeof *r);
  return true;
}

std::string InitFailure(std::string_view said) {
  if (said.empty() || said[0] != 'F') return {};
  return std::string(said.substr(1));
}

}  // namespace sandpool
