// Fuzz target: the tools' JSON reader (common/json.*), which parses
// QMP replies from QEMU and status files. Invariants: a value parses or
// fails cleanly, never deeper than its limit, and the lookups the tools use
// on it (get, find_string, json_string_field) find only what is there.
#include <cstdint>
#include <string>
#include <string_view>

#include "board/qmp.h"
#include "fuzz_support.h"
#include "ulnic/util/json.h"

namespace {

// Depth of the parsed tree (the parser takes 65 levels at most).
int depth(const ulnic::Json& v) {
  int d = 0;
  for (const auto& item : v.array) d = std::max(d, depth(item));
  for (const auto& [k, member] : v.object) d = std::max(d, depth(member));
  return d + 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = ulnic::parse_json(text);
  if (!doc) {
    FUZZ_CHECK(!doc.error().message.empty());
    return 0;
  }
  FUZZ_CHECK(depth(*doc) <= 65);
  using T = ulnic::Json::Type;
  FUZZ_CHECK(doc->type == T::kArray || doc->array.empty());
  FUZZ_CHECK(doc->type == T::kObject || doc->object.empty());
  // Every key the document has is found by get(); find_string() answers
  // only with strings.
  for (const auto& [k, member] : doc->object) FUZZ_CHECK(doc->get(k) != nullptr);
  for (const char* key : {"status", "desc", "return", "QMP", ""}) {
    const ulnic::Json* s = doc->find_string(key);
    FUZZ_CHECK(s == nullptr || s->type == T::kString);
    FUZZ_CHECK(ulnic::board::json_string_field(std::string(text), key) == (s ? s->string : std::string{}));
  }
  return 0;
}
