/* The model as the scheduler sees it, checked against the fixtures README's description of
 * synth-spm512-l4-e256-q4_k_m (4 layers, n_embd 256, n_ff 768, 8/4 heads of 32, vocabulary 512,
 * separate output; Q4_K except Q6_K for output, blk.2/3.attn_v and blk.2/3.ffn_down). */
#include <string.h>

#include "sched/shape.h"
#include "test.h"

int main(void)
{
    const char *fx = test_fixtures();
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/models/synth-spm512-l4-e256-q4_k_m.gguf", fx);
    model *m = model_load(path, err, sizeof err);
    REQUIRE(m, "%s", err);
    sched_model sm;
    REQUIRE(sched_model_from(m, 1000, 8, 1, 4, &sm, err, sizeof err) == 0, "%s", err);

    /* per layer: q, o 256x256; k, v 256x128; gate, up 256x768; down 768x256 */
    double per_layer = 2 * 65536.0 + 2 * 32768.0 + 3 * 196608.0;
    double q6 = (2 * 32768.0 + 2 * 196608.0) / 4;   /* attn_v and ffn_down of 2 of 4 layers */
    CHECK(sm.n_layer == 4 && sm.n_embd == 256 && sm.n_vocab == 512, "shape %d %d %d", sm.n_layer,
          sm.n_embd, sm.n_vocab);
    CHECK(sm.layer_params[DT_Q6_K] == q6, "Q6_K per layer %g, want %g", sm.layer_params[DT_Q6_K], q6);
    CHECK(sm.layer_params[DT_Q4_K] == per_layer - q6, "Q4_K per layer %g", sm.layer_params[DT_Q4_K]);
    double other = 0;
    for (int t = 0; t < DT_COUNT; t++)
        if (t != DT_Q4_K && t != DT_Q6_K)
            other += sm.layer_params[t];
    CHECK(other == 0, "%g weights of other types", other);

    /* bytes: Q4_K 144 and Q6_K 210 bytes per 256 weights, plus two F32 norms of 256 */
    double bytes = (per_layer - q6) * 144 / 256 + q6 * 210 / 256 + 2 * 256 * 4;
    CHECK(fabs(sm.layer_bytes - bytes) < 1e-6, "layer bytes %.1f, want %.1f", sm.layer_bytes, bytes);
    CHECK(sm.kv_bytes == 2 * 2 * 4 * 32 * 1000.0, "KV per layer %g", sm.kv_bytes);
    /* Q4_K and Q6_K products quantize their activations first: two jobs per matrix */
    CHECK(sm.layer_calls == 14, "%g kernel jobs per layer (7 matrices)", sm.layer_calls);
    /* norms and adds 4 * 256, rope 256 + 128, K and V to the cache 2 * 128, attention 256,
     * SiLU 768 */
    CHECK(sm.layer_vector == 1024 + 384 + 256 + 256 + 768, "%g vector values per layer",
          sm.layer_vector);
    CHECK(sm.out_calls == 2, "%d kernel jobs for the output matrix", sm.out_calls);
    CHECK(sm.out_type == DT_Q6_K && sm.out_params == 512 * 256.0, "output %d %g", sm.out_type,
          sm.out_params);
    CHECK(sm.out_bytes == 512 * 256.0 * 210 / 256 + 256 * 4, "output bytes %g", sm.out_bytes);
    CHECK(sm.embd_row_bytes == 144, "embedding row %g (Q4_K, 256 weights)", sm.embd_row_bytes);
    CHECK(sm.hop_bytes >= 256 * 4, "hop bytes %g", sm.hop_bytes);
    CHECK(sm.proc_bytes > 0 && sm.head_bytes > 0, "buffers %g %g", sm.proc_bytes, sm.head_bytes);

    /* the buffers grow with the batch */
    sched_model big;
    REQUIRE(sched_model_from(m, 1000, 512, 1, 4, &big, err, sizeof err) == 0, "%s", err);
    CHECK(big.proc_bytes > sm.proc_bytes, "batch 512 buffers not larger");
    /* F16 activations on the wire: two bytes less per value and hop */
    REQUIRE(sched_model_from(m, 1000, 8, 1, 2, &big, err, sizeof err) == 0, "%s", err);
    CHECK(sm.hop_bytes - big.hop_bytes == 2 * 256, "F16 hop %g vs F32 %g", big.hop_bytes, sm.hop_bytes);
    CHECK(sched_model_from(m, 0, 8, 1, 4, &big, err, sizeof err) == -1, "context 0 accepted");
    CHECK(sched_model_from(m, 1000, 8, 0, 4, &big, err, sizeof err) == -1, "0 sequences accepted");
    /* Of a batch's buffers only the hidden states and frames stay (the engine hands the rest of
     * a prompt's scratch back): per row 4 * 256 of hidden state and three frames of hop bytes;
     * per sequence a decode row of scratch, F32 x, q, k, v, att, gate, up (256 + 2 * 256 +
     * 2 * 128 + 2 * 768) and about a byte per value of quantized activations (1.1 * 768). */
    double row = 4.0 * (256 + 2 * 256 + 2 * 128 + 2 * 768) + 1.1 * 768;
    double batch_row = 4.0 * 256 + 3 * sm.hop_bytes;
    CHECK(fabs(sm.proc_bytes - (row + 8 * batch_row)) < 1e-6, "buffers %g, want %g", sm.proc_bytes,
          row + 8 * batch_row);
    /* four sequences: four caches and four decode rows */
    REQUIRE(sched_model_from(m, 1000, 8, 4, 4, &big, err, sizeof err) == 0, "%s", err);
    CHECK(big.kv_bytes == 4 * sm.kv_bytes && big.kv_read == sm.kv_read, "KV of 4 sequences %g / %g",
          big.kv_bytes, big.kv_read);
    CHECK(fabs(big.proc_bytes - sm.proc_bytes - 3 * row) < 1e-6, "buffers of 4 sequences %g",
          big.proc_bytes);
    /* the head's weights: 512 rows, fewer than MODEL_EMBD_ROWS, so the whole embedding (Q4_K)
     * with the output matrix (Q6_K) and its norm */
    CHECK(sm.head_page == 512 * 144 + 512 * 256.0 * 210 / 256 + 256 * 4, "head weights %g",
          sm.head_page);
    model_free(m);

    /* A large vocabulary, untied: of the embedding, the pages of MODEL_EMBD_ROWS rows, each of
     * them two pages at most (rows of 4608 bytes: three); tied, the whole matrix. */
    gguf_tensor embd = {.nbytes = 128256ull * 4608}, out = {.nbytes = 128256ull * 6720},
                norm = {.nbytes = 8192 * 4};
    model big_vocab = {.hp = {.n_vocab = 128256}, .tok_embd = &embd, .output_norm = &norm,
                       .output = &out};
    CHECK(model_head_bytes(&big_vocab) == out.nbytes + norm.nbytes + MODEL_EMBD_ROWS * 3 * 4096ull,
          "untied head %llu", (unsigned long long)model_head_bytes(&big_vocab));
    big_vocab.output = &embd;
    CHECK(model_head_bytes(&big_vocab) == embd.nbytes + norm.nbytes, "tied head %llu",
          (unsigned long long)model_head_bytes(&big_vocab));
    return test_done();
}
