// Keeps docs/protocol.md honest: every "golden:" block in the document must
// match the hand-written vectors in golden.h byte for byte (and the offset
// column must be right), and every vector must appear in the document.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/wire/golden.h"

namespace naarpc {
namespace {

std::string ReadDoc() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  std::string path = std::string(srcdir ? srcdir : ".") + "/" +
                     (ws ? ws : "naarpc") + "/docs/protocol.md";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool IsHexByte(const std::string& t) {
  return t.size() == 2 && std::isxdigit(uint8_t(t[0])) &&
         std::isxdigit(uint8_t(t[1])) && !std::islower(uint8_t(t[0])) &&
         !std::islower(uint8_t(t[1]));
}

struct Parsed {
  std::map<std::string, std::vector<uint8_t>> blocks;  // name -> bytes
  std::vector<std::string> errors;                     // malformed lines etc.
};

Parsed ParseGoldenBlocks(const std::string& doc) {
  Parsed out;
  std::istringstream lines(doc);
  std::string line, name;
  std::vector<uint8_t>* cur = nullptr;
  while (std::getline(lines, line)) {
    if (line.rfind("golden: ", 0) == 0) {
      name = line.substr(8);
      if (out.blocks.count(name)) out.errors.push_back("duplicate block " + name);
      cur = &out.blocks[name];
      continue;
    }
    if (cur == nullptr) continue;
    if (line.rfind("```", 0) == 0) {
      if (cur->empty()) out.errors.push_back("empty block " + name);
      cur = nullptr;
      continue;
    }
    if (line.rfind("off", 0) == 0) continue;  // column header
    // "<decimal offset>  <hex bytes...>  <description>"
    std::istringstream toks(line);
    std::string t;
    if (!(toks >> t) || t.find_first_not_of("0123456789") != std::string::npos) {
      out.errors.push_back(name + ": unparsable line: " + line);
      continue;
    }
    if (std::stoul(t) != cur->size()) {
      out.errors.push_back(name + ": offset column wrong in line: " + line);
    }
    size_t n = 0;
    while (toks >> t && IsHexByte(t)) {
      cur->push_back(uint8_t(std::stoul(t, nullptr, 16)));
      ++n;
    }
    if (n == 0) out.errors.push_back(name + ": no bytes in line: " + line);
  }
  if (cur != nullptr) out.errors.push_back("unterminated block " + name);
  return out;
}

TEST(ProtocolDoc, GoldenBlocksMatchTestVectors) {
  const Parsed parsed = ParseGoldenBlocks(ReadDoc());
  for (const std::string& e : parsed.errors) ADD_FAILURE() << "docs/protocol.md: " << e;
  const auto& blocks = parsed.blocks;
  ASSERT_FALSE(blocks.empty());
  size_t matched = 0;
  for (const golden::NamedExample& ex : golden::kAllExamples) {
    auto it = blocks.find(std::string(ex.name));
    if (it == blocks.end()) {
      ADD_FAILURE() << "docs/protocol.md has no golden block " << ex.name;
      continue;
    }
    EXPECT_EQ(it->second, *ex.bytes) << "golden block " << ex.name;
    ++matched;
  }
  EXPECT_EQ(matched, blocks.size()) << "docs/protocol.md has golden blocks "
                                       "that golden.h does not know";
}

TEST(ProtocolDoc, ParserCatchesMistakes) {
  // The checker itself must be able to fail.
  Parsed bad = ParseGoldenBlocks("```text\ngolden: x\n  0  01 02  a\n  3  03  b\n```\n");
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_NE(bad.errors[0].find("offset column wrong"), std::string::npos);
  EXPECT_EQ(ParseGoldenBlocks("golden: y\n  0  zz\n").errors.size(), 2u);  // no bytes, unterminated
  Parsed ok = ParseGoldenBlocks(
      "```text\ngolden: x\noff  bytes\n  0  01 02  a\n  2  0A  b\n```\n");
  EXPECT_TRUE(ok.errors.empty());
  EXPECT_EQ(ok.blocks["x"], (std::vector<uint8_t>{0x01, 0x02, 0x0A}));
}

}  // namespace
}  // namespace naarpc
