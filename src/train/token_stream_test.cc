#include "train/token_stream.h"

#include <gtest/gtest.h>

#include <fstream>

#include "core/file_io.h"
#include "core/temp_dir.h"
#include "train/train_spec.h"

namespace spot::train {
namespace {

class TokenStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { tmp_.emplace(TempDir::Create("token_stream_test").value()); }
  std::string Path(const std::string& name) const { return (tmp_->path() / name).string(); }
  std::optional<TempDir> tmp_;
};

TEST_F(TokenStreamTest, TextRoundTripsThroughTheVocabulary) {
  const std::string text = "In the beginning God created the heaven and the earth.\n";
  Result<PreparedText> p = PrepareText(text, 0.25, Path("data"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->vocab.size(), 18);  // distinct bytes, in byte order: '\n' first
  EXPECT_EQ(p->vocab.bytes[0], '\n');
  EXPECT_EQ(p->train_tokens + p->val_tokens, static_cast<int64_t>(text.size()));
  EXPECT_EQ(p->val_tokens, static_cast<int64_t>(text.size()) / 4);

  Result<Vocabulary> v = ReadVocabulary(Path("data/vocab.json"));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->bytes, p->vocab.bytes);
  auto train = ReadTokenFile(Path("data/train.bin"), "uint16", v->size(), 1);
  auto val = ReadTokenFile(Path("data/val.bin"), "uint16", v->size(), 1);
  ASSERT_TRUE(train.ok() && val.ok());
  std::vector<int64_t> all = *train;
  all.insert(all.end(), val->begin(), val->end());
  EXPECT_EQ(Decode(*v, all), text);
  EXPECT_EQ(ReadFile(Path("data/train.bin"))->size(), 2 * train->size()) << "uint16, no header";
}

TEST_F(TokenStreamTest, TokenFilesAreLittleEndianInEitherWidth) {
  const std::vector<int64_t> ids = {0, 1, 258, 65535};
  ASSERT_TRUE(WriteTokenFile(Path("a.bin"), "uint16", ids).ok());
  EXPECT_EQ(*ReadFile(Path("a.bin")), std::string("\0\0\1\0\2\1\xff\xff", 8));
  EXPECT_EQ(*ReadTokenFile(Path("a.bin"), "uint16", 0, 1), ids);
  const std::vector<int64_t> wide = {70000, 4294967295};
  ASSERT_TRUE(WriteTokenFile(Path("b.bin"), "uint32", wide).ok());
  EXPECT_EQ(*ReadTokenFile(Path("b.bin"), "uint32", 0, 1), wide);
  Status too_big = WriteTokenFile(Path("c.bin"), "uint16", {1, 65536});
  EXPECT_NE(too_big.message().find("token 1 is 65536, which uint16 cannot hold"), std::string::npos)
      << too_big.message();
}

TEST_F(TokenStreamTest, BadTokenFilesNameTheFileAndTheToken) {
  std::ofstream(Path("odd.bin"), std::ios::binary) << std::string("\1\0\2", 3);
  auto odd = ReadTokenFile(Path("odd.bin"), "uint16", 0, 1);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("odd.bin: 3 bytes is not a whole number of uint16 tokens"),
            std::string::npos)
      << odd.status().message();

  ASSERT_TRUE(WriteTokenFile(Path("v.bin"), "uint16", {1, 2, 9, 3}).ok());
  auto outside = ReadTokenFile(Path("v.bin"), "uint16", 5, 1);
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("v.bin: token 2 is 9, outside the vocabulary of 5"),
            std::string::npos)
      << outside.status().message();
  auto short_file = ReadTokenFile(Path("v.bin"), "uint16", 0, 33);
  ASSERT_FALSE(short_file.ok());
  EXPECT_NE(short_file.status().message().find("4 tokens; a window needs at least 33"),
            std::string::npos);
}

TEST_F(TokenStreamTest, BadVocabulariesAndPromptsAreRefused) {
  for (const auto& [json, want] : std::vector<std::pair<std::string, std::string>>{
           {"[1, 2]", "not a JSON object"},
           {R"({"kind": "bpe", "tokens": [1]})", "kind must be \"bytes\""},
           {R"({"kind": "bytes", "tokens": [65, 300]})", "tokens[1] is 300"},
           {R"({"kind": "bytes", "tokens": [65, 65]})", "tokens[1] is 65"},
           {R"({"kind": "bytes", "tokens": []})", "non-empty list"},
           {R"({"kind": "bytes", "tokens": [65], "tokens": [66]})", "tokens: given twice"}}) {
    std::ofstream(Path("vocab.json")) << json;
    auto v = ReadVocabulary(Path("vocab.json"));
    ASSERT_FALSE(v.ok()) << json;
    EXPECT_NE(v.status().message().find(want), std::string::npos) << v.status().message();
  }
  const Vocabulary v = VocabularyOf("abc");
  auto bad = Encode(v, "abd");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "byte 100 at offset 2 is not in the vocabulary");
  EXPECT_EQ(Decode(v, {0, 2, 7}), "ac?");
}

TEST_F(TokenStreamTest, GptJobsTakeTheVocabularyAndCheckTheirShape) {
  ASSERT_TRUE(PrepareText("abcdefgh abcdefgh\n", 0.3, Path("data")).ok());
  const std::string head = "batch_size: 4\nsteps: 2\noptimizer: {type: adam}\n";
  auto ok = ParseTrainSpec(head + "model: {name: gpt, context: 8}\ndataset: {name: tokens, path: " +
                               Path("data") + "}\n",
                           "j.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->gpt.vocab, 10);  // a-h, space, newline
  EXPECT_EQ(ok->loss, "lm");
  EXPECT_EQ(ok->context, 8) << "the window defaults to the model's context";
  EXPECT_EQ(ok->stride, 8);

  for (const auto& [body, want] : std::vector<std::pair<std::string, std::string>>{
           {"model: {name: gpt, heads: 3}\ndataset: {name: tokens, path: DATA}\n",
            "model.heads: must divide width"},
           {"model: {name: gpt, context: 8}\ndataset: {name: tokens, path: DATA, context: 16}\n",
            "dataset.context: is longer than model.context"},
           {"model: {name: gpt}\n", "dataset.name: model gpt trains on token ids"},
           {"model: cnn\nprecision: fp16\n", "precision: fp16 needs a GPU"},
           {"model: cnn\nprecision: int8\n",
            "precision: unknown value 'int8' (expected one of: fp32, bf16, fp16, auto)"},
           {"model: gpt\n", "model: gpt takes its settings"},
           {"model: cnn\ndataset: {name: tokens, path: DATA, context: 8}\n",
            "tokens train language models"},
           {"model: {name: gpt}\ndataset: {name: tokens, path: NOWHERE}\n",
            "not a directory (train.bin, val.bin)"}}) {
    std::string yaml = head + body;
    for (auto [from, to] : {std::pair<std::string, std::string>{"DATA", Path("data")},
                            {"NOWHERE", Path("nowhere")}}) {
      for (size_t at; (at = yaml.find(from)) != std::string::npos;)
        yaml.replace(at, from.size(), to);
    }
    auto s = ParseTrainSpec(yaml, "j.yaml");
    ASSERT_FALSE(s.ok()) << body;
    EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().message();
  }
}

}  // namespace
}  // namespace spot::train
