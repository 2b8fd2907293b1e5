// common/json.cpp: the tools' JSON reader and the string escape their
// writers share (ulnic node status --json, slot_abuse, the benchmarks).
#include "ulnic/util/json.h"

#include <gtest/gtest.h>

#include <string>

namespace ulnic {
namespace {

TEST(JsonEscape, QuotesAndBackslashesAreEscapedControlCharactersBecomeSpaces) {
  EXPECT_EQ(json_escape(""), "");
  EXPECT_EQ(json_escape("plain text 0.1"), "plain text 0.1");
  EXPECT_EQ(json_escape("say \"hi\" C:\\dir"), "say \\\"hi\\\" C:\\\\dir");
  EXPECT_EQ(json_escape(std::string("a\nb\tc\0d", 7)), "a b c d");
}

TEST(JsonEscape, WhatItWritesTheReaderReadsBack) {
  const std::string s = "build \"x\\y\" v1\n";
  auto j = parse_json("{\"name\": \"" + json_escape(s) + "\"}");
  ASSERT_TRUE(j) << j.error().message;
  const Json* name = j->get("name");
  ASSERT_NE(name, nullptr);
  EXPECT_EQ(name->string, "build \"x\\y\" v1 ");
}

}  // namespace
}  // namespace ulnic
