// SHA-1 (FIPS 180-4) of a byte string, as 40 lowercase hex digits. For naming Lua scripts to
// Redis (EVALSHA), which is what SHA-1 is used for here: not for anything security depends on.
#pragma once

#include <string>
#include <string_view>

namespace sandpool {

std::string Sha1Hex(std::string_view data);

}  // namespace sandpool
