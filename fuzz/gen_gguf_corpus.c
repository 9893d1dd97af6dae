/* gen_gguf_corpus.c - writes the seed corpus of fuzz_gguf: small, valid GGUF
 * files that between them use every value type, nested arrays, both
 * versions, a custom alignment and several tensor types, so the fuzzer
 * starts from inputs that reach every part of the reader.
 *
 * usage: gen_gguf_corpus DIR    (the committed seeds are in fuzz/corpus/gguf) */
#include <stdio.h>
#include <stdlib.h>

#include "gguf_writer.h"
#include "tensor_type.h"

/* Writes one seed file; exits on failure (a build tool). */
static void save(gw_writer *w, const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!gw_write_file(w, path)) {
        fprintf(stderr, "gen_gguf_corpus: cannot write %s: %s\n", path,
                gw_error(w) ? gw_error(w) : "I/O error");
        exit(1);
    }
    gw_free(w);
}

/* One key of every scalar type and a string. */
static gw_writer *scalars(void) {
    gw_writer *w = gw_new();
    gw_add_u8(w, "u8", 1);
    gw_add_i8(w, "i8", -1);
    gw_add_u16(w, "u16", 2);
    gw_add_i16(w, "i16", -2);
    gw_add_u32(w, "u32", 3);
    gw_add_i32(w, "i32", -3);
    gw_add_f32(w, "f32", 0.5f);
    gw_add_bool(w, "bool", true);
    gw_add_u64(w, "u64", 4);
    gw_add_i64(w, "i64", -4);
    gw_add_f64(w, "f64", 0.25);
    gw_add_str(w, "general.name", "seed");
    return w;
}

/* Arrays of every element type, including arrays of arrays. */
static gw_writer *arrays(void) {
    gw_writer *w = gw_new();
    gw_add_arr(w, "u8", GGUF_UINT8, (uint8_t[]){1, 2}, 2);
    gw_add_arr(w, "i16", GGUF_INT16, (int16_t[]){-1, 1}, 2);
    gw_add_arr(w, "u32", GGUF_UINT32, (uint32_t[]){7}, 1);
    gw_add_arr(w, "f32", GGUF_FLOAT32, (float[]){1, -1}, 2);
    gw_add_arr(w, "bool", GGUF_BOOL, (bool[]){true, false}, 2);
    gw_add_arr(w, "i64", GGUF_INT64, (int64_t[]){-9}, 1);
    gw_add_arr(w, "f64", GGUF_FLOAT64, (double[]){2}, 1);
    gw_add_arr(w, "str", GGUF_STRING, (const char *[]){"a", "", "bc"}, 3);
    gw_begin_arr(w, "nested", GGUF_ARRAY);
    gw_add_arr(w, NULL, GGUF_UINT8, (uint8_t[]){5}, 1);
    gw_begin_arr(w, NULL, GGUF_ARRAY);
    gw_add_arr(w, NULL, GGUF_STRING, (const char *[]){"x"}, 1);
    gw_end_arr(w);
    gw_end_arr(w);
    return w;
}

/* A tiny model: tokenizer arrays and tensors of several types. */
static gw_writer *model(uint32_t version, uint32_t alignment) {
    gw_writer *w = gw_new();
    gw_set_version(w, version);
    gw_add_str(w, "general.architecture", "llama");
    if (alignment) gw_set_alignment(w, alignment);
    gw_add_u32(w, "llama.block_count", 1);
    gw_add_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, (const char *[]){"<unk>", "<s>", "a"}, 3);
    gw_add_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, (float[]){0, 0, -1}, 3);
    gw_add_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, (int32_t[]){2, 3, 1}, 3);
    gw_add_tensor(w, "token_embd.weight", NU_TYPE_F32, 2, (int64_t[]){4, 3}, NULL);
    gw_add_tensor(w, "blk.0.attn_q.weight", NU_TYPE_Q8_0, 2, (int64_t[]){32, 2}, NULL);
    gw_add_tensor(w, "blk.0.attn_norm.weight", NU_TYPE_F16, 1, (int64_t[]){4}, NULL);
    gw_add_tensor(w, "blk.0.ffn_up.weight", NU_TYPE_Q4_0, 4, (int64_t[]){32, 1, 1, 1}, NULL);
    return w;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    save(gw_new(), argv[1], "empty");
    save(scalars(), argv[1], "scalars");
    save(arrays(), argv[1], "arrays");
    save(model(3, 0), argv[1], "model_v3");
    save(model(2, 0), argv[1], "model_v2");
    save(model(3, 64), argv[1], "model_align64");
    return 0;
}
