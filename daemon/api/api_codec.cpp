// daemon/api/api_codec.cpp — TextCodec over the model's Tokenizer and ChatTemplate.
#include "base/check.h"
#include "daemon/api/api.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace kvasir {

namespace {

class TokStream : public TextStream {
 public:
  TokStream(const Tokenizer& t, bool skip_special) : d_(t, skip_special) {}
  std::string push(int32_t id) override { return d_.push(id); }
  std::string flush() override { return d_.flush(); }

 private:
  StreamDecoder d_;
};

class TokCodec : public TextCodec {
 public:
  TokCodec(const Tokenizer& t, const ChatTemplate* c) : tok_(t), chat_(c) {}
  std::vector<int32_t> encode(const std::string& text, bool add_special,
                              bool parse_special) const override {
    return tok_.encode(text, add_special, parse_special);
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    return tok_.decode(ids, skip_special);
  }
  std::unique_ptr<TextStream> stream(bool skip_special) const override {
    return std::make_unique<TokStream>(tok_, skip_special);
  }
  int32_t vocab_size() const override { return tok_.vocab_size(); }
  bool is_eog(int32_t id) const override { return tok_.is_eog(id); }
  std::vector<int32_t> encode_chat(const ChatTurns& turns) const override {
    KV_CHECK(chat_ != nullptr, "this model has no chat template; use /v1/completions");
    ChatInput in;
    in.messages = turns.messages;
    in.tools = turns.tools;
    in.kwargs = turns.kwargs;
    in.add_generation_prompt = turns.add_generation_prompt;
    return encode_prompt(tok_, chat_->apply(in));
  }
  std::string chat_template_source() const override { return chat_ ? chat_->source() : ""; }

 private:
  const Tokenizer& tok_;
  const ChatTemplate* chat_;
};

}  // namespace

std::shared_ptr<TextCodec> make_text_codec(const Tokenizer& tok, const ChatTemplate* chat) {
  return std::make_shared<TokCodec>(tok, chat);
}

}  // namespace kvasir
