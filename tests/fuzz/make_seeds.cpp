// tests/fuzz/make_seeds.cpp — writes the seed corpus of the fuzz targets.
//
//   fuzz_make_seeds OUT_DIR   (scripts/fuzz --seeds writes tests/fuzz/corpus/)
//
// One file per loader-advisory class (element counts whose
// byte size wraps, dimensions summing past the file, offsets past the end,
// duplicate keys, huge string or array lengths, alignment 0 or not a power
// of two, quantised rows not a multiple of the block size, n_dims > 4,
// unknown types), plus well-formed files the mutator starts from. Small on
// purpose: the whole corpus stays far under 1 MB.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "net/wire.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/tiny_model.h"

using namespace kvasir;
using namespace kvasir::test;
namespace fs = std::filesystem;

namespace {

fs::path g_out;

void put(const std::string& target, const std::string& name, const Bytes& b) {
  fs::create_directories(g_out / target);
  GgufWriter::write_file((g_out / target / name).string(), b);
}
void put_text(const std::string& target, const std::string& name, const std::string& s,
              uint8_t prefix) {
  Bytes b;
  b.push_back(prefix);
  b.insert(b.end(), s.begin(), s.end());
  put(target, name, b);
}
Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// A small valid GGUF with one F32 and one Q8_0 tensor and some metadata.
GgufWriter base_gguf() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 1);
  w.add_array<uint32_t>("arr.u32", GgufType::U32, {1, 2, 3});
  w.add_tensor("a.weight", DType::F32, {4, 2}, Bytes(32, 0x3f));
  w.add_tensor("q.weight", DType::Q8_0, {32, 1}, Bytes(34, 1));
  return w;
}

void gguf_seeds() {
  const std::string T = "fuzz_gguf";
  put(T, "valid_small.gguf", base_gguf().bytes());
  {
    TinySpec s;
    s.layers = 1, s.hidden = 32, s.heads = 2, s.kv_heads = 1, s.ffn = 32, s.ctx = 64;
    s.matrix_type = DType::Q8_0;
    const fs::path tmp = fs::temp_directory_path() / "kvasir_fuzz_tiny.gguf";
    write_tiny_gguf(tmp.string(), s);
    put(T, "valid_tiny_model_q8.gguf", read_file(tmp));
    fs::remove(tmp);
  }
  // Element count whose byte size wraps (2^62 x 8 F32 = 2^67 bytes; 2^61 x 2^3).
  {
    GgufWriter w = base_gguf();
    w.add_tensor_raw("wrap", 0, {uint64_t(1) << 62, 8}, {}, 0);
    put(T, "elements_bytes_wrap.gguf", w.bytes());
    GgufWriter w2 = base_gguf();
    w2.add_tensor_raw("wrap", 0, {uint64_t(1) << 32, uint64_t(1) << 32, 1, 1}, {}, 0);
    put(T, "elements_count_wrap.gguf", w2.bytes());
    GgufWriter w3 = base_gguf();
    w3.add_tensor_raw("neg", 0, {kMax, 1}, {}, 0);  // ne = -1 as int64
    put(T, "dim_negative.gguf", w3.bytes());
  }
  // Dimensions summing past the file: tensors each in bounds alone, not together,
  // and one larger than the whole file.
  {
    GgufWriter w = base_gguf();
    w.add_tensor_raw("big", 0, {1024, 1024}, {}, 0);
    put(T, "dims_past_file.gguf", w.bytes());
    GgufWriter w2 = base_gguf();
    w2.add_tensor_raw("overlap_tail", 0, {8, 2}, {}, 32);  // runs past the data section
    put(T, "dims_sum_past_file.gguf", w2.bytes());
  }
  // Offsets past the end, and offset + size wrapping.
  {
    GgufWriter w = base_gguf();
    w.add_tensor_raw("far", 0, {4}, {}, uint64_t(1) << 40);
    put(T, "offset_past_end.gguf", w.bytes());
    GgufWriter w2 = base_gguf();
    w2.add_tensor_raw("wrapoff", 0, {4}, {}, kMax - 15);
    put(T, "offset_wrap.gguf", w2.bytes());
    GgufWriter w3 = base_gguf();
    w3.add_tensor_raw("misaligned", 0, {4}, {}, 4);
    put(T, "offset_misaligned.gguf", w3.bytes());
  }
  // Duplicate keys and duplicate tensor names.
  {
    GgufWriter w = base_gguf();
    w.add_u32("llama.block_count", 2);
    put(T, "duplicate_key.gguf", w.bytes());
    GgufWriter w2 = base_gguf();
    w2.add_tensor("a.weight", DType::F32, {4, 2}, Bytes(32, 0));
    put(T, "duplicate_tensor.gguf", w2.bytes());
  }
  // Huge string and array lengths; huge counts in the header.
  {
    GgufWriter w = base_gguf();
    Bytes b;
    Bytes len(8);
    uint64_t huge = kMax - 3;
    std::memcpy(len.data(), &huge, 8);
    b = len;
    w.add_raw("str.huge", GgufType::STRING, b);
    put(T, "string_length_huge.gguf", w.bytes());

    GgufWriter w2 = base_gguf();
    GgufWriter::Layout lay;
    Bytes b2 = w2.bytes(&lay);
    GgufWriter::put_u64(b2, lay.kv_key[0], uint64_t(1) << 62);
    put(T, "key_length_huge.gguf", b2);

    GgufWriter w3 = base_gguf();
    w3.add_raw("arr.huge", GgufType::ARRAY,
               GgufWriter::encode_array(GgufType::U32, uint64_t(1) << 62, Bytes(12, 0)));
    put(T, "array_count_huge.gguf", w3.bytes());

    GgufWriter w4 = base_gguf();
    w4.add_raw("arr.strings", GgufType::ARRAY,
               GgufWriter::encode_array(GgufType::STRING, uint64_t(1) << 40,
                                        GgufWriter::encode_string("x")));
    put(T, "string_array_count_huge.gguf", w4.bytes());

    GgufWriter w5 = base_gguf();
    Bytes inner = GgufWriter::encode_array(GgufType::U8, 3, Bytes{1, 2, 3});
    Bytes nested = inner;
    for (int i = 0; i < 40; ++i) nested = GgufWriter::encode_array(GgufType::ARRAY, 1, nested);
    w5.add_raw("arr.nested", GgufType::ARRAY, nested);
    put(T, "array_nested_deep.gguf", w5.bytes());

    GgufWriter w6 = base_gguf();
    Bytes b6 = w6.bytes(&lay);
    GgufWriter::put_u64(b6, lay.n_tensors, kMax);
    put(T, "n_tensors_huge.gguf", b6);
    Bytes b7 = w6.bytes(&lay);
    GgufWriter::put_u64(b7, lay.n_kv, uint64_t(1) << 61);
    put(T, "n_kv_huge.gguf", b7);
    Bytes b8 = w6.bytes(&lay);
    GgufWriter::put_u64(b8, lay.tensor_name[0], kMax);
    put(T, "tensor_name_huge.gguf", b8);
  }
  // Alignment 0, not a power of two, huge, of the wrong type.
  {
    for (auto [name, a] : {std::pair<const char*, uint32_t>{"alignment_zero.gguf", 0},
                          {"alignment_npot.gguf", 24},
                          {"alignment_huge.gguf", 1u << 31}}) {
      GgufWriter w = base_gguf();
      w.add_u32("general.alignment", a);
      put(T, name, w.bytes());
    }
    GgufWriter w = base_gguf();
    w.add_string("general.alignment", "32");
    put(T, "alignment_wrong_type.gguf", w.bytes());
    GgufWriter w2 = base_gguf();
    w2.alignment = 64;
    w2.add_u32("general.alignment", 64);
    put(T, "alignment_64_valid.gguf", w2.bytes());
  }
  // Quantised rows not a multiple of the block size.
  {
    GgufWriter w = base_gguf();
    w.add_tensor_raw("q4_0_ragged", uint32_t(DType::Q4_0), {33, 1}, Bytes(40, 0));
    put(T, "quant_row_not_block_multiple.gguf", w.bytes());
    GgufWriter w2 = base_gguf();
    w2.add_tensor_raw("q4_k_ragged", uint32_t(DType::Q4_K), {255, 2}, Bytes(512, 0));
    put(T, "quant_k_row_not_block_multiple.gguf", w2.bytes());
  }
  // n_dims > 4, n_dims 0, n_dims huge.
  {
    GgufWriter w = base_gguf();
    w.add_tensor_raw("five", 0, {1, 1, 1, 1, 2}, Bytes(8, 0));
    put(T, "n_dims_5.gguf", w.bytes());
    GgufWriter w2 = base_gguf();
    GgufWriter::Layout lay;
    Bytes b = w2.bytes(&lay);
    GgufWriter::put_u32(b, lay.tensor_n_dims[0], 0xFFFFFFFFu);
    put(T, "n_dims_huge.gguf", b);
    Bytes b0 = w2.bytes(&lay);
    GgufWriter::put_u32(b0, lay.tensor_n_dims[0], 0);
    put(T, "n_dims_zero.gguf", b0);
  }
  // Unknown types: tensor type, metadata value type, array element type; bad
  // versions and magic; truncations.
  {
    GgufWriter w = base_gguf();
    w.add_tensor_raw("unk", 1000, {4}, Bytes(16, 0));
    put(T, "tensor_type_unknown.gguf", w.bytes());
    GgufWriter w1 = base_gguf();
    w1.add_tensor_raw("removed_q4_2", 4, {32}, Bytes(32, 0));
    put(T, "tensor_type_removed.gguf", w1.bytes());
    GgufWriter w2 = base_gguf();
    w2.add_raw("kv.unknown", GgufType(99), Bytes(8, 0));
    put(T, "kv_type_unknown.gguf", w2.bytes());
    GgufWriter w3 = base_gguf();
    w3.add_raw("arr.unknown", GgufType::ARRAY, GgufWriter::encode_array(GgufType(77), 2, Bytes(8, 0)));
    put(T, "array_elem_type_unknown.gguf", w3.bytes());
    for (uint32_t v : {1u, 4u, 0xFFFFFFFFu}) {
      GgufWriter wv = base_gguf();
      wv.version = v;
      put(T, "version_" + std::to_string(v) + ".gguf", wv.bytes());
    }
    Bytes b = base_gguf().bytes();
    Bytes trunc(b.begin(), b.begin() + b.size() / 2);
    put(T, "truncated_half.gguf", trunc);
    put(T, "truncated_header.gguf", Bytes(b.begin(), b.begin() + 10));
    put(T, "empty.gguf", Bytes{});
  }
  // Tokenizer metadata that lies: ids past the vocabulary, arrays of
  // mismatched length, merges naming missing tokens.
  {
    GgufWriter w = base_gguf();
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "smollm");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "ab", "<|endoftext|>"});
    w.add_array<int32_t>("tokenizer.ggml.token_type", GgufType::I32, {1, 1});
    w.add_string_array("tokenizer.ggml.merges", {"a b", "x y", "ab"});
    w.add_u32("tokenizer.ggml.bos_token_id", 100000);
    w.add_i32("tokenizer.ggml.eos_token_id", -5);
    put(T, "tokenizer_lies.gguf", w.bytes());
    GgufWriter w2 = base_gguf();
    w2.add_string("tokenizer.ggml.model", "llama");
    w2.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a"});
    w2.add_array<float>("tokenizer.ggml.scores", GgufType::F32, {0, 0, 0, -1, -2, -3, -4});
    w2.add_array<int32_t>("tokenizer.ggml.token_type", GgufType::I32, {2, 3, 3, 1, 1});
    put(T, "tokenizer_spm_scores_mismatch.gguf", w2.bytes());
  }
}

std::string st_header(const std::string& tensors) { return "{" + tensors + "}"; }
Bytes st_file(uint64_t header_len, const std::string& header, size_t data_bytes) {
  Bytes b(8 + header.size() + data_bytes, 0);
  std::memcpy(b.data(), &header_len, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}
Bytes st(const std::string& header, size_t data_bytes) {
  return st_file(header.size(), header, data_bytes);
}

void safetensors_seeds() {
  const std::string T = "fuzz_safetensors";
  const std::string ok =
      R"("__metadata__":{"format":"pt"},"a.weight":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]},)"
      R"("model.norm.weight":{"dtype":"BF16","shape":[4],"data_offsets":[32,40]})";
  put(T, "valid_small.safetensors", st(st_header(ok), 40));
  {
    TinySpec s;
    s.layers = 1, s.hidden = 16, s.heads = 2, s.kv_heads = 1, s.ffn = 16, s.vocab = 32, s.ctx = 64;
    const fs::path dir = fs::temp_directory_path() / "kvasir_fuzz_tiny_st";
    write_tiny_safetensors(dir.string(), s);
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors")
        put(T, "valid_tiny_model.safetensors", read_file(e.path()));
    fs::remove_all(dir);
  }
  // Element counts whose byte size wraps.
  put(T, "elements_bytes_wrap.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]})"), 0));
  put(T, "elements_count_wrap.safetensors",
      st(st_header(R"("w":{"dtype":"F16","shape":[4294967296,4294967296,2],"data_offsets":[0,0]})"), 0));
  put(T, "shape_negative.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]})"), 16));
  put(T, "shape_huge_u64.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,16]})"), 16));
  put(T, "shape_float.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[4.5],"data_offsets":[0,16]})"), 16));
  // Dimensions summing past the file; size mismatch.
  put(T, "dims_past_file.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[1024,1024],"data_offsets":[0,4194304]})"), 16));
  put(T, "size_mismatch.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[0,12]})"), 16));
  // Offsets past the end, reversed, wrapping.
  put(T, "offset_past_end.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[1099511627776,1099511627792]})"), 16));
  put(T, "offset_reversed.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[0],"data_offsets":[16,0]})"), 16));
  put(T, "offset_wrap.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[18446744073709551608,8]})"), 16));
  put(T, "offset_negative.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[-16,0]})"), 16));
  put(T, "offset_three.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[0,16,32]})"), 32));
  // Duplicate keys (tensor names; fields inside a tensor).
  put(T, "duplicate_tensor.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), 16));
  put(T, "duplicate_field.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[4],"shape":[400],"data_offsets":[0,16]})"), 16));
  // Huge header lengths and strings.
  put(T, "header_len_huge.safetensors", st_file(kMax, st_header(ok), 40));
  put(T, "header_len_past_file.safetensors", st_file(1 << 20, st_header(ok), 40));
  put(T, "header_len_zero.safetensors", st_file(0, st_header(ok), 40));
  put(T, "header_len_short.safetensors", st_file(5, st_header(ok), 40));
  put(T, "name_long.safetensors",
      st(st_header("\"" + std::string(4000, 'n') + R"(":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), 16));
  {
    std::string deep(20000, '[');
    deep += std::string(20000, ']');
    put(T, "json_nested_deep.safetensors", st(st_header(R"("__metadata__":)" + deep), 0));
  }
  // n_dims > 4.
  put(T, "n_dims_5.safetensors",
      st(st_header(R"("w":{"dtype":"F32","shape":[1,1,1,1,4],"data_offsets":[0,16]})"), 16));
  // Unknown / unsupported dtypes; wrong field types; not JSON.
  for (const char* dt : {"I64", "F8_E4M3", "Q4_0", "", "f32"})
    put(T, std::string("dtype_") + (dt[0] ? dt : "empty") + ".safetensors",
        st(st_header(std::string(R"("w":{"dtype":")") + dt + R"(","shape":[4],"data_offsets":[0,16]})"), 16));
  put(T, "dtype_number.safetensors",
      st(st_header(R"("w":{"dtype":0,"shape":[4],"data_offsets":[0,16]})"), 16));
  put(T, "tensor_not_object.safetensors", st(st_header(R"("w":[1,2,3])"), 16));
  put(T, "metadata_not_strings.safetensors",
      st(st_header(R"("__metadata__":{"a":[1,{"b":null}]},"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), 16));
  put(T, "header_not_object.safetensors", st("[1,2,3]", 0));
  put(T, "header_not_json.safetensors", st("{\"w\":{\"dtype\":\"F32\",", 16));
  put(T, "header_nul.safetensors", st(std::string("{\"w\0\":1}", 9), 0));
  put(T, "empty.safetensors", Bytes{});
}

const char* kTexts[] = {
    "Hello, world! How are you today?",
    "  leading and   multiple   spaces\n\n\ttabs\r\n",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<s> [INST] hi [/INST] </s> <unk> <|begin_of_text|><|eot_id|><|endoftext|>",
    "numbers 1234567890 3.14159 1,000,000",
    "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80 \xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a",
    "bad utf8 \xff\xfe \xc3 \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf end",
    "\xe2\x96\x81\xe2\x96\x81 metaspace \xe2\x96\x81 <0x41> <0xFF>",
    "don't I'll we've they're 'S 'LL",
    "",
};

void tokenizer_seeds() {
  const std::string T = "fuzz_tokenizer";
  int i = 0;
  for (const char* t : kTexts) {
    // Tokenizer (low nibble) and flags (add_special, parse_special, skip, raw ids).
    const uint8_t sel = uint8_t((i % 9) | ((i & 1) ? 0x30 : 0x20) | ((i % 3 == 0) ? 0xC0 : 0));
    put_text(T, "text_" + std::to_string(i) + ".bin", t, sel);
    ++i;
  }
  put_text(T, "ids_out_of_range.bin", std::string("\xff\xff\xff\x7f\x00\x00\x00\x80\x01\x00\x00\x00", 12), 0xC1);
  // A minimal Hugging Face tokenizer.json (prefix 0xFF) and lies in it.
  const std::string hf_ok = R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"<s>":3},"merges":["a b"]},)"
                            R"("pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"use_regex":true},)"
                            R"("added_tokens":[{"id":4,"content":"<|endoftext|>","special":true}]})";
  put_text(T, "hf_valid.json", hf_ok, 0xFF);
  put_text(T, "hf_added_id_huge.json",
           R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel","use_regex":true},)"
           R"("added_tokens":[{"id":18446744073709551615,"content":"x","special":true}]})",
           0xFF);
  put_text(T, "hf_added_id_negative.json",
           R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel","use_regex":true},)"
           R"("added_tokens":[{"id":-1,"content":"x","special":true}]})",
           0xFF);
  put_text(T, "hf_vocab_duplicate_id.json",
           R"({"model":{"type":"BPE","vocab":{"a":0,"b":0},"merges":[["a","b"],["a"]]},"pre_tokenizer":{"type":"ByteLevel"}})",
           0xFF);
  put_text(T, "hf_spm_merges.json",
           R"({"model":{"type":"BPE","vocab":{"<unk>":0,"<s>":1,"</s>":2,"<0x41>":3,"\u2581":4,"a":5,"\u2581a":6},)"
           R"("merges":["\u2581 a"," ","a"],"byte_fallback":true,"unk_token":"<unk>"},)"
           R"("pre_tokenizer":{"type":"Metaspace"},"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>"}}]}})",
           0xFF);
  put_text(T, "hf_post_processor_lies.json",
           R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},)"
           R"("post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":5}}]}})",
           0xFF);
}

void api_seeds() {
  const std::string T = "fuzz_api_request";
  auto P = [&](const std::string& name, uint8_t which, const std::string& body) {
    put_text(T, name, body, which);
  };
  P("completion_valid.json", 0,
    R"({"model":"m","prompt":"Hello","max_tokens":8,"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,)"
    R"("stop":["\n","END"],"stream":true,"stream_options":{"include_usage":true},"echo":true,"logprobs":2,"seed":42,)"
    R"("presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,"ignore_eos":false,"skip_special_tokens":true,"stop_token_ids":[1,2]})");
  P("completion_ids.json", 0, R"({"prompt":[1,2,3,-1,2147483648],"max_tokens":1})");
  P("completion_ids_nested.json", 0, R"({"prompt":[[1,2],[3]],"max_tokens":1})");
  P("completion_out_of_range.json", 0,
    R"({"prompt":"x","max_tokens":-1,"temperature":-2,"top_p":0,"top_k":-5,"min_p":2,"logprobs":99,"n":3,"seed":-1})");
  P("completion_huge_numbers.json", 0,
    R"({"prompt":"x","max_tokens":1e308,"temperature":1e400,"top_k":18446744073709551616,"seed":18446744073709551615})");
  P("completion_wrong_types.json", 0,
    R"({"prompt":{"a":1},"max_tokens":"8","stream":"yes","stop":[1,null],"temperature":[0]})");
  P("completion_duplicate_keys.json", 0, R"({"prompt":"a","prompt":[1],"max_tokens":1,"max_tokens":99999999})");
  P("completion_many_stops.json", 0,
    R"({"prompt":"a","stop":["a","b","c","d","e","f"],"max_tokens":1})");
  P("completion_long_stop.json", 0, R"({"prompt":"a","stop":")" + std::string(40, 's') + R"("})");
  P("chat_valid.json", 1,
    R"({"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},)"
    R"({"role":"assistant","content":[{"type":"text","text":"yo"}]}],"max_tokens":4,"logprobs":true,"top_logprobs":3})");
  P("chat_bad_messages.json", 1,
    R"({"messages":[{"role":"wizard","content":1},{"content":"x"},[],{"role":"user"}]})");
  P("chat_empty.json", 1, R"({"messages":[]})");
  P("chat_max_completion_tokens.json", 1,
    R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":0,"max_tokens":5})");
  // Structured outputs and tools: every spec field and the shapes that
  // once reached a 500 (a tool_choice whose type is not a string).
  P("chat_structured_outputs.json", 1,
    R"({"messages":[{"role":"user","content":"x"}],"structured_outputs":{"grammar":"root ::= root"},"n":3})");
  P("chat_structured_regex.json", 1,
    R"({"messages":[{"role":"user","content":"x"}],"structured_outputs":{"regex":"[^\s\S]"}})");
  P("completion_response_format.json", 0,
    R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"a","strict":true,)"
    R"("schema":{"type":"object","properties":{"a":{"type":"string","pattern":"[^\s\S]"}},"required":["a"]}}}})");
  P("completion_guided.json", 0,
    R"({"prompt":"x","guided_choice":["a","b"],"guided_json":{"type":"object"},"guided_regex":"a+"})");
  P("chat_tools.json", 1,
    R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"get_weather",)"
    R"("description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],)"
    R"("tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false})");
  P("chat_tool_choice_type_null.json", 1,
    R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],)"
    R"("tool_choice":{"type":null}})");
  P("chat_tool_choice_wrong.json", 1,
    R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],)"
    R"("tool_choice":[5,true,{}]})");
  P("tokenize_prompt.json", 2, R"({"prompt":"hello","add_special_tokens":false})");
  P("tokenize_messages.json", 2, R"({"messages":[{"role":"user","content":"x"}]})");
  P("detokenize.json", 3, R"({"tokens":[1,2,3,-7,4294967296]})");
  P("detokenize_bad.json", 3, R"({"tokens":"abc"})");
  P("json_not_object.json", 4, R"([1,2,3])");
  P("json_malformed.json", 4, R"({"a":)");
  P("json_nested_deep.json", 4, "{\"a\":" + std::string(20000, '[') + std::string(20000, ']') + "}");
  P("json_bad_utf8.json", 0, "{\"prompt\":\"\xff\xfe\xc3\",\"max_tokens\":1}");
  P("json_escapes.json", 0, R"({"prompt":"\ud800\udc00\u0000\ud800","max_tokens":1})");
}


// Host link frames (net/wire.h): one well-formed frame of each type, and
// the refusals the decoder must make: truncation, a length past the frame,
// a wrong magic, another wire version, an unknown type or flag, a boundary
// whose shape disagrees with its bytes or whose size wraps.
Bytes frame(const net::Payload& p, uint64_t seq = 0, uint16_t version = net::kWireVersion) {
  Bytes b;
  net::encode_frame(p, seq, b, version);
  return b;
}
void set_u32(Bytes& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = uint8_t(v >> (8 * i));
}

void wire_seeds() {
  const std::string T = "fuzz_wire";
  net::Hello hello;
  hello.name = "worker-1";
  hello.nonce.fill(7);
  net::Challenge challenge;
  challenge.nonce.fill(9);
  net::Proof proof;
  proof.mac.fill(3);
  const Bytes desc(48, 2), blob(40, 5);
  const std::vector<float> bnd(8 * 16, 0.5f);  // [8, 16] f32
  net::Batch batch;
  batch.msg_kind = 1, batch.msg_version = 1, batch.batch_id = 12, batch.slot = 1;
  batch.n_rows = 2, batch.n_tokens = 8, batch.descriptor = desc;
  batch.boundary_tokens = 8, batch.hidden = 16;
  batch.boundary = net::ByteView(reinterpret_cast<const uint8_t*>(bnd.data()), bnd.size() * 4);
  put(T, "hello.bin", frame(hello));
  put(T, "challenge.bin", frame(challenge, 1));
  put(T, "proof.bin", frame(proof, 2));
  put(T, "refuse.bin", frame(net::Refuse{ErrorCode::kUnauthenticated, "wrong key"}));
  put(T, "plan.bin", frame(net::Plan{blob}));
  put(T, "ready.bin", frame(net::Ready{}));
  put(T, "batch.bin", frame(batch, 5));
  put(T, "result.bin", frame(net::Result{12, 1, blob}));
  put(T, "ping.bin", frame(net::Ping{123456789}));
  put(T, "pong.bin", frame(net::Pong{123456789}));
  put(T, "bye.bin", frame(net::Bye{}));
  const std::string spec = "{\"type\":\"object\",\"required\":[\"a\"]}";
  put(T, "grammar.bin",
      frame(net::Grammar{3, 77,
                         net::ByteView(reinterpret_cast<const uint8_t*>(spec.data()), spec.size())},
            6));
  net::Hidden hidden;
  hidden.msg_kind = 1, hidden.msg_version = 1, hidden.batch_id = 12, hidden.slot = 1;
  hidden.n_rows = 2, hidden.n_tokens = 8, hidden.first_stage = 1, hidden.n_times = 2;
  hidden.busy_ns[0] = 1000, hidden.busy_ns[1] = 2000;
  hidden.boundary_tokens = 8, hidden.hidden = 16, hidden.boundary = batch.boundary;
  put(T, "hidden.bin", frame(hidden, 7));
  const Bytes good = frame(batch, 5);
  put(T, "truncated_header.bin", Bytes(good.begin(), good.begin() + 10));
  put(T, "truncated_payload.bin", Bytes(good.begin(), good.end() - 1));
  Bytes b = good;
  set_u32(b, 12, 0xffffffffu);
  put(T, "length_huge.bin", b);
  b = good, b[0] = 'X';
  put(T, "magic_wrong.bin", b);
  put(T, "version_old.bin", frame(hello, 0, net::kWireVersion - 1));
  put(T, "version_new.bin", frame(hello, 0, net::kWireVersion + 1));
  b = good, b[6] = 99;
  put(T, "type_unknown.bin", b);
  b = good, b[8] = 1;
  put(T, "flags_unknown.bin", b);
  const size_t tokens_at = good.size() - bnd.size() * 4 - 8;
  b = good, set_u32(b, tokens_at, 9);
  put(T, "boundary_shape_lies.bin", b);
  b = good, set_u32(b, tokens_at, 0xffffffffu), set_u32(b, tokens_at + 4, 0xffffffffu);
  put(T, "boundary_wraps.bin", b);
  b = good, set_u32(b, net::kHeaderBytes + 28, 0x7fffffff);
  put(T, "descriptor_past_end.bin", b);
  b = frame(hello), set_u32(b, net::kHeaderBytes + 3, 1 << 20);
  put(T, "name_huge.bin", b);
  Bytes two = frame(net::Ping{1});
  const Bytes second = frame(net::Pong{1}, 1);
  two.insert(two.end(), second.begin(), second.end());
  put(T, "two_frames.bin", two);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  gguf_seeds();
  safetensors_seeds();
  tokenizer_seeds();
  api_seeds();
  wire_seeds();
  return 0;
}
