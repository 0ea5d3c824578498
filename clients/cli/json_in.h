// Reading JSON for `sandpool map`: a small strict parser (RFC 8259: objects, arrays, strings with
// every escape, numbers, true/false/null) into a tree, and the tree as msgpack. Pure, no I/O.
// Depth is limited (64) and errors say where, so one bad input line becomes one error record.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace sandpool::cli {

struct JsonField;

struct Json {
  enum class Kind { kNull, kBool, kInt, kUint, kDouble, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool b = false;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string s;
  std::vector<Json> items;                           // kArray
  std::vector<JsonField> fields;  // kObject, in input order

  // The field named `name` of an object, or nullptr.
  const Json* Find(std::string_view name) const;
};

// One member of an object. (Not a std::pair: a pair of an incomplete Json inside Json itself is
// refused by clang.)
struct JsonField {
  JsonField(std::string k, Json v) : first(std::move(k)), second(std::move(v)) {}
  std::string first;
  Json second;
};

// Parses one JSON text (surrounding white space allowed, nothing else after it).
Result<Json> ParseJson(std::string_view text);

// The value as msgpack: strings as str, integers as (u)int, objects as maps in their order.
std::string JsonToMsgpack(const Json& v);

}  // namespace sandpool::cli
