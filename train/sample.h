/* train/sample.h — text generation from the current weights.
 *
 * The idea: encode the prompt, prefill it through the KV cache in one call,
 * then draw one token at a time (temperature, top-k) feeding each back at the
 * next position, and stream its bytes out as they come. Generation stops at
 * max_tokens, at an end-of-text token, or when the context (seq_len) is full. */
#pragma once
#include <stdio.h>
#include "../common/util.h"
#include "../data/tokenizer.h"
#include "../model/llama.h"

typedef struct {
    float temperature;  /* 0 = always the most likely token */
    int top_k;          /* 0 = the whole vocabulary */
    int max_tokens;
} SampleOptions;

/* One token id from logits (V): softmax(logits / temperature) over the top_k
 * largest. */
int sample_token(const float *logits, int V, float temperature, int top_k, Rng *rng);
/* Encodes the prompt (an empty prompt starts from end-of-text) and checks that
 * it leaves room in a context of seq_len; dies in words if not. Returns the
 * token count; *ids is malloc'ed. */
int sample_encode_prompt(const Tokenizer *tok, const char *prompt, int seq_len, int **ids);
/* Generate after the prompt, writing the text (prompt included) to out.
 * Returns the number of tokens generated. */
int sample_generate(Model *m, const Tokenizer *tok, const char *prompt, const SampleOptions *o, Rng *rng, FILE *out);
/* `build/train sample --model=DIR ...`: text from a checkpoint or a Hugging Face
 * folder (argv[0] = "sample"). Returns the exit code. */
int sample_main(int argc, char **argv);
