#include "clients/cli/json_in.h"

#include <msgpack.hpp>

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace sandpool::cli {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view t) : t_(t) {}

  Result<Json> Document() {
    Json v;
    if (Status s = Value(v, 0); !s.ok()) return s;
    Space();
    if (p_ != t_.size()) return Fail("unexpected text after the value");
    return v;
  }

 private:
  Status Fail(const std::string& what) const {
    return Status::Error("invalid JSON at byte " + std::to_string(p_ + 1) + ": " + what);
  }
  void Space() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r')) ++p_;
  }
  bool Literal(std::string_view word) {
    if (t_.substr(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }

  Status Value(Json& v, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    Space();
    if (p_ >= t_.size()) return Fail("a value is missing");
    char c = t_[p_];
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v.kind = Json::Kind::kString;
      return String(v.s);
    }
    if (Literal("true")) {
      v.kind = Json::Kind::kBool;
      v.b = true;
      return Status::Ok();
    }
    if (Literal("false")) {
      v.kind = Json::Kind::kBool;
      return Status::Ok();
    }
    if (Literal("null")) return Status::Ok();
    if (c == '-' || (c >= '0' && c <= '9')) return Number(v);
    return Fail(std::string("unexpected character '") + c + "'");
  }

  Status Object(Json& v, int depth) {
    v.kind = Json::Kind::kObject;
    ++p_;
    Space();
    if (p_ < t_.size() && t_[p_] == '}') {
      ++p_;
      return Status::Ok();
    }
    while (true) {
      Space();
      if (p_ >= t_.size() || t_[p_] != '"') return Fail("an object key (a string) is expected");
      std::string key;
      if (Status s = String(key); !s.ok()) return s;
      for (const auto& f : v.fields) {
        if (f.first == key) return Fail("duplicate key \"" + key + "\"");
      }
      Space();
      if (p_ >= t_.size() || t_[p_] != ':') return Fail("':' is expected");
      ++p_;
      Json item;
      if (Status s = Value(item, depth + 1); !s.ok()) return s;
      v.fields.emplace_back(std::move(key), std::move(item));
      Space();
      if (p_ < t_.size() && t_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < t_.size() && t_[p_] == '}') {
        ++p_;
        return Status::Ok();
      }
      return Fail("',' or '}' is expected");
    }
  }

  Status Array(Json& v, int depth) {
    v.kind = Json::Kind::kArray;
    ++p_;
    Space();
    if (p_ < t_.size() && t_[p_] == ']') {
      ++p_;
      return Status::Ok();
    }
    while (true) {
      Json item;
      if (Status s = Value(item, depth + 1); !s.ok()) return s;
      v.items.push_back(std::move(item));
      Space();
      if (p_ < t_.size() && t_[p_] == ',') {
        ++p_;
        continue;
      }
      if (p_ < t_.size() && t_[p_] == ']') {
        ++p_;
        return Status::Ok();
      }
      return Fail("',' or ']' is expected");
    }
  }

  static void Utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  bool Hex4(uint32_t* out) {
    if (p_ + 4 > t_.size()) return false;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = t_[p_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return false;
    }
    *out = v;
    return true;
  }

  Status String(std::string& out) {
    ++p_;  // the opening quote
    while (true) {
      if (p_ >= t_.size()) return Fail("unterminated string");
      char c = t_[p_++];
      if (c == '"') return Status::Ok();
      if (static_cast<unsigned char>(c) < 0x20) return Fail("a control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= t_.size()) return Fail("unterminated escape");
      char e = t_[p_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return Fail("bad \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (!Literal("\\u") || !Hex4(&lo) || lo < 0xDC00 || lo > 0xDFFF) return Fail("a lone surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail("a lone surrogate");
          }
          Utf8(cp, out);
          break;
        }
        default:
          return Fail(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  Status Number(Json& v) {
    size_t start = p_;
    if (t_[p_] == '-') ++p_;
    if (p_ >= t_.size() || !(t_[p_] >= '0' && t_[p_] <= '9')) return Fail("bad number");
    if (t_[p_] == '0') {
      ++p_;
    } else {
      while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
    }
    bool integer = true;
    if (p_ < t_.size() && t_[p_] == '.') {
      integer = false;
      ++p_;
      if (p_ >= t_.size() || !(t_[p_] >= '0' && t_[p_] <= '9')) return Fail("bad number");
      while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
    }
    if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
      integer = false;
      ++p_;
      if (p_ < t_.size() && (t_[p_] == '+' || t_[p_] == '-')) ++p_;
      if (p_ >= t_.size() || !(t_[p_] >= '0' && t_[p_] <= '9')) return Fail("bad number");
      while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') ++p_;
    }
    std::string text(t_.substr(start, p_ - start));
    errno = 0;
    if (integer && text[0] == '-') {
      v.kind = Json::Kind::kInt;
      v.i = std::strtoll(text.c_str(), nullptr, 10);
    } else if (integer) {
      v.kind = Json::Kind::kUint;
      v.u = std::strtoull(text.c_str(), nullptr, 10);
    }
    if (!integer || errno == ERANGE) {
      v.kind = Json::Kind::kDouble;
      v.d = std::strtod(text.c_str(), nullptr);
    }
    return Status::Ok();
  }

  std::string_view t_;
  size_t p_ = 0;
};

void Pack(msgpack::packer<msgpack::sbuffer>& pk, const Json& v) {
  switch (v.kind) {
    case Json::Kind::kNull: pk.pack_nil(); break;
    case Json::Kind::kBool: v.b ? pk.pack_true() : pk.pack_false(); break;
    case Json::Kind::kInt: pk.pack_int64(v.i); break;
    case Json::Kind::kUint: pk.pack_uint64(v.u); break;
    case Json::Kind::kDouble: pk.pack_double(v.d); break;
    case Json::Kind::kString:
      pk.pack_str(static_cast<uint32_t>(v.s.size()));
      pk.pack_str_body(v.s.data(), static_cast<uint32_t>(v.s.size()));
      break;
    case Json::Kind::kArray:
      pk.pack_array(static_cast<uint32_t>(v.items.size()));
      for (const Json& x : v.items) Pack(pk, x);
      break;
    case Json::Kind::kObject:
      pk.pack_map(static_cast<uint32_t>(v.fields.size()));
      for (const auto& [k, x] : v.fields) {
        pk.pack_str(static_cast<uint32_t>(k.size()));
        pk.pack_str_body(k.data(), static_cast<uint32_t>(k.size()));
        Pack(pk, x);
      }
      break;
  }
}

}  // namespace

const Json* Json::Find(std::string_view name) const {
  for (const auto& [k, v] : fields) {
    if (k == name) return &v;
  }
  return nullptr;
}

Result<Json> ParseJson(std::string_view text) { return Parser(text).Document(); }

std::string JsonToMsgpack(const Json& v) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  Pack(pk, v);
  return std::string(buf.data(), buf.size());
}

}  // namespace sandpool::cli
