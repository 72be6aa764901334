// tests/data/test_prepare.cpp — the byte tokenizer and JSONL → rows: hand-checked token ids and
// loss weights for prompt/completion and chat examples, drop vs truncate, packing, the errors
// (with line numbers), and a write → Dataset round trip.
#include "common/test_util.h"
#include "data/data_writer.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "sftdp/check.h"
#include "sftdp/data.h"

using sftdp::test::user_error_of;

namespace {

using namespace sftdp::data;
namespace tok = sftdp::data::tok;
using sftdp::UserError;
using V = std::vector<int32_t>;
using W = std::vector<float>;

// The [r] row of a RowSet field.
template <class T>
std::vector<T> row(const std::vector<T>& field, int T_, int r) {
  return std::vector<T>(field.begin() + r * T_, field.begin() + (r + 1) * T_);
}

TEST(Tokenizer, BytesAreIdsAndSpecialsFollow) {
  V ids;
  tok::append_bytes("A\xC3\xA9~", ids);  // "Aé~": é is two UTF-8 bytes
  EXPECT_EQ(ids, (V{65, 0xC3, 0xA9, 126}));
  EXPECT_EQ(tok::kVocabSize, 264);
  EXPECT_EQ(tok::render({tok::kBos, 104, 105, tok::kEnd, tok::kPad}), "<|bos|>hi<|end|><|pad|>");
  EXPECT_EQ(tok::special_name(tok::kAssistant), "<|assistant|>");
  EXPECT_EQ(tok::special_name(300), "<|?300|>");
  const std::string table = tok::table_text();
  for (const char* name : {"<|bos|>", "<|eos|>", "<|pad|>", "<|system|>", "<|user|>",
                           "<|assistant|>", "<|end|>", "<|reserved|>", "vocab_size = 264"})
    EXPECT_CONTAINS(table, name);
}

TEST(ParseExample, PromptCompletionHandChecked) {
  const Example ex = parse_example(R"({"prompt": "ab", "completion": "c", "id": 7})");
  EXPECT_EQ(ex.tokens, (V{256, 'a', 'b', 'c', 257}));
  EXPECT_EQ(ex.weights, (W{0, 0, 0, 1, 1}));  // the completion and <|eos|>
}

TEST(ParseExample, ChatLossOnAssistantContentAndEnd) {
  const Example ex = parse_example(
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},)"
      R"( {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"},)"
      R"( {"role": "assistant", "content": "bc"}]})");
  EXPECT_EQ(tok::render(ex.tokens),
            "<|bos|><|system|>s<|end|><|user|>u<|end|><|assistant|>a<|end|><|user|>v<|end|>"
            "<|assistant|>bc<|end|><|eos|>");
  //                 bos sys s end usr u end ast a end usr v end ast b c end eos
  EXPECT_EQ(ex.weights, (W{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(ParseExample, ChatEndingWithUserHasNoLossOnEos) {
  const Example ex = parse_example(
      R"({"messages": [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]})");
  EXPECT_EQ(ex.tokens, (V{256, 261, 'x', 262, 260, 'y', 262, 257}));
  EXPECT_EQ(ex.weights, (W{0, 0, 1, 1, 0, 0, 0, 0}));
}

TEST(ParseExample, BadLinesSayWhatIsWrong) {
  EXPECT_CONTAINS(user_error_of([] { parse_example(R"({"prompt": "a", )"); }), "invalid JSON");
  EXPECT_CONTAINS(user_error_of([] { parse_example("[1, 2]"); }), "expected a JSON object");
  EXPECT_CONTAINS(user_error_of([] { parse_example(R"({"prompt": "a"})"); }),
                  "missing \"completion\"");
  EXPECT_CONTAINS(user_error_of([] { parse_example(R"({"prompt": "a", "completion": 5})"); }),
                  "\"completion\" must be a string, found number");
  EXPECT_CONTAINS(user_error_of([] { parse_example(R"({"text": "a"})"); }), "missing fields");
  EXPECT_CONTAINS(user_error_of([] { parse_example(R"({"messages": []})"); }), "non-empty array");
  EXPECT_CONTAINS(
      user_error_of([] { parse_example(R"({"messages": [{"role": "tool", "content": "x"}]})"); }),
      "messages[0]: role must be system, user or assistant, found \"tool\"");
  EXPECT_CONTAINS(user_error_of([] { parse_example(R"({"messages": [{"role": "user"}]})"); }),
                  "messages[0]: missing \"content\"");
  EXPECT_CONTAINS(
      user_error_of([] { parse_example(R"({"messages": [{"role": "user", "content": "x"}]})"); }),
      "no assistant turn");
  EXPECT_CONTAINS(
      user_error_of([] { parse_example(R"({"prompt": "a", "completion": "b", "messages": []})"); }),
      "use one form");
}

TEST(RowBuilder, RowIsShiftedByOneAndPaddedWithZeroWeight) {
  RowBuilder builder({6, Overflow::kDrop, false});
  builder.add(parse_example(R"({"prompt": "ab", "completion": "c"})"));
  const RowSet rows = builder.finish();
  ASSERT_EQ(rows.rows, 1);
  EXPECT_FALSE(rows.packed);
  EXPECT_TRUE(rows.segment_ids.empty());
  EXPECT_EQ(rows.inputs, (V{256, 'a', 'b', 'c', 258, 258}));
  EXPECT_EQ(rows.targets, (V{'a', 'b', 'c', 257, 258, 258}));
  EXPECT_EQ(rows.loss_weights, (W{0, 0, 1, 1, 0, 0}));  // weight of the TARGET token
  EXPECT_EQ(builder.stats().completion_tokens, 2);
}

TEST(RowBuilder, DropVersusTruncateForExamplesLongerThanTPlusOne) {
  const Example fits = parse_example(R"({"prompt": "ab", "completion": "c"})");   // 5 tokens
  const Example over = parse_example(R"({"prompt": "ab", "completion": "cd"})");  // 6 tokens
  RowBuilder drop({4, Overflow::kDrop, false}), cut({4, Overflow::kTruncate, false});
  for (RowBuilder* b : {&drop, &cut}) {
    b->add(fits);
    b->add(over);
  }
  EXPECT_EQ(drop.stats().examples, 2);
  EXPECT_EQ(drop.stats().dropped, 1);
  EXPECT_EQ(drop.stats().truncated, 0);
  EXPECT_EQ(drop.finish().rows, 1);
  EXPECT_EQ(cut.stats().dropped, 0);
  EXPECT_EQ(cut.stats().truncated, 1);
  EXPECT_EQ(cut.stats().completion_tokens, 2 + 2);  // "c",eos from fits; "c","d" from over
  const RowSet rows = cut.finish();
  ASSERT_EQ(rows.rows, 2);
  EXPECT_EQ(row(rows.inputs, 4, 1), (V{256, 'a', 'b', 'c'}));  // first T+1 = 5 tokens kept
  EXPECT_EQ(row(rows.targets, 4, 1), (V{'a', 'b', 'c', 'd'}));
  EXPECT_EQ(row(rows.loss_weights, 4, 1), (W{0, 0, 1, 1}));
}

TEST(RowBuilder, PackingFillsRowsWithSegmentsAndRestartingPositions) {
  RowBuilder builder({10, Overflow::kDrop, true});
  builder.add(parse_example(R"({"prompt": "a", "completion": "b"})"));    // 4 tokens, span 3
  builder.add(parse_example(R"({"prompt": "c", "completion": "de"})"));   // 5 tokens, span 4
  builder.add(parse_example(R"({"prompt": "fg", "completion": "hi"})"));  // 6 tokens, span 5
  const RowSet rows = builder.finish();
  ASSERT_TRUE(rows.packed);
  ASSERT_EQ(rows.rows, 2);  // 3 + 4 fit in 10; the third needs 5 > 3 left
  EXPECT_EQ(row(rows.inputs, 10, 0), (V{256, 'a', 'b', 256, 'c', 'd', 'e', 258, 258, 258}));
  EXPECT_EQ(row(rows.targets, 10, 0), (V{'a', 'b', 257, 'c', 'd', 'e', 257, 258, 258, 258}));
  EXPECT_EQ(row(rows.loss_weights, 10, 0), (W{0, 1, 1, 0, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(row(rows.segment_ids, 10, 0), (V{1, 1, 1, 2, 2, 2, 2, 0, 0, 0}));
  EXPECT_EQ(row(rows.positions, 10, 0), (V{0, 1, 2, 0, 1, 2, 3, 0, 0, 0}));
  EXPECT_EQ(row(rows.segment_ids, 10, 1), (V{1, 1, 1, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(row(rows.positions, 10, 1), (V{0, 1, 2, 3, 4, 0, 0, 0, 0, 0}));
}

class PrepareFile : public ::testing::Test {
 protected:
  sftdp::test::TempDir dir;
  std::string jsonl = dir / "in.jsonl";
};

TEST_F(PrepareFile, ErrorsNameFileAndLineCountingBlankLines) {
  sftdp::test::write_file(jsonl, "{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": 1}\n");
  EXPECT_CONTAINS(user_error_of([&] {
                    prepare_jsonl(jsonl, {8, Overflow::kDrop, false});
                  }),
                  jsonl + ":3: \"prompt\" must be a string");
  EXPECT_EQ(user_error_of([&] {
              prepare_jsonl(dir / "missing.jsonl", {8, Overflow::kDrop, false});
            }),
            dir / "missing.jsonl" + ": not found");
  sftdp::test::write_file(jsonl, "\n  \n");
  EXPECT_CONTAINS(user_error_of([&] {
                    prepare_jsonl(jsonl, {8, Overflow::kDrop, false});
                  }),
                  "no examples");
  sftdp::test::write_file(jsonl, "{\"prompt\": \"abcdefgh\", \"completion\": \"ijk\"}\r\n");
  EXPECT_CONTAINS(user_error_of([&] {
                    prepare_jsonl(jsonl, {8, Overflow::kDrop, false});
                  }),
                  "no rows left: all 1 examples are longer than");
  EXPECT_EQ(prepare_jsonl(jsonl, {8, Overflow::kTruncate, false}).rows.rows, 1);  // CRLF is fine
}

TEST_F(PrepareFile, WrittenRowsReadBackThroughDataset) {
  sftdp::test::write_file(jsonl,
                          "{\"prompt\": \"1+2=\", \"completion\": \"3\"}\n"
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"},"
                          " {\"role\": \"assistant\", \"content\": \"yo\"}]}\n"
                          "{\"prompt\": \"rev:ab=\", \"completion\": \"ba\"}\n");
  for (bool pack : {false, true}) {
    const Prepared p = prepare_jsonl(jsonl, {16, Overflow::kDrop, pack});
    const std::string h5 = dir / (pack ? "packed.h5" : "plain.h5");
    write_data_file(h5, p.rows, tok::kVocabSize);
    EXPECT_EQ(sftdp::test::list_files(dir.path()).size(), pack ? 3u : 2u);  // no temp file left
    Dataset ds({h5}, 16, tok::kVocabSize, 16);
    ASSERT_EQ(ds.rows(), p.rows.rows);
    EXPECT_EQ(ds.rows(), pack ? 2 : 3);
    std::vector<int64_t> all(ds.rows());
    for (int64_t i = 0; i < ds.rows(); ++i) all[i] = ds.rows() - 1 - i;  // reversed
    Batch batch;
    ds.read_rows(all, batch);
    EXPECT_EQ(batch.has_segments(), pack);
    EXPECT_EQ(batch.has_positions(), pack);
    for (int64_t i = 0; i < ds.rows(); ++i) {
      const int r = static_cast<int>(all[i]), b = static_cast<int>(i);
      EXPECT_EQ(row(batch.inputs, 16, b), row(p.rows.inputs, 16, r));
      EXPECT_EQ(row(batch.targets, 16, b), row(p.rows.targets, 16, r));
      EXPECT_EQ(row(batch.loss_weights, 16, b), row(p.rows.loss_weights, 16, r));
      if (pack) {
        EXPECT_EQ(row(batch.segment_ids, 16, b), row(p.rows.segment_ids, 16, r));
        EXPECT_EQ(row(batch.positions, 16, b), row(p.rows.positions, 16, r));
      }
    }
  }
}

}  // namespace
