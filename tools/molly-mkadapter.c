/* SPDX-License-Identifier: MIT */
/*
 * molly-mkadapter: writes a LoRA adapter with seeded random weights for a base model, in a
 * public format (a PEFT directory or a llama.cpp GGUF LoRA file), for tests and benchmarks.
 *
 *   molly-mkadapter --base MODEL.gguf --rank R [--alpha A] [--targets q,k,v,o,gate,up,down|all]
 *                   [--seed S] [--dtype f32|f16|bf16] --format peft|gguf --out PATH
 *
 * Every layer gets the chosen targets (default all); alpha defaults to the rank (scale 1).
 * A ~ N(0, 1/n_in), B ~ N(0, 0.02²): B is not zero, so the adapter visibly changes the
 * model's output (lora-gen.h). The same seed gives the same weights in either format.
 *
 * Exit status: 0, or 1 after "molly-mkadapter: <reason>".
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/model.h"
#include "engine/quant.h"
#include "lora/lora-gen.h"

static void usage(FILE *f)
{
	fputs("usage: molly-mkadapter --base MODEL.gguf --rank R [--alpha A]\n"
	      "                       [--targets q,k,v,o,gate,up,down|all] [--seed S]\n"
	      "                       [--dtype f32|f16|bf16] --format peft|gguf --out PATH\n",
	      f);
}

static int fail(const char *fmt, const char *arg)
{
	fprintf(stderr, "molly-mkadapter: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	return 1;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	if (!*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || v > max)
		return -EINVAL;
	*ret = v;
	return 0;
}

int main(int argc, char **argv)
{
	enum {
		OPT_BASE = 0x100,
		OPT_RANK,
		OPT_ALPHA,
		OPT_TARGETS,
		OPT_SEED,
		OPT_DTYPE,
		OPT_FORMAT,
		OPT_OUT
	};
	static const struct option options[] = {
		{ "base", required_argument, NULL, OPT_BASE },
		{ "rank", required_argument, NULL, OPT_RANK },
		{ "alpha", required_argument, NULL, OPT_ALPHA },
		{ "targets", required_argument, NULL, OPT_TARGETS },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "dtype", required_argument, NULL, OPT_DTYPE },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "out", required_argument, NULL, OPT_OUT },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	_cleanup_(model_freep) struct model *base = NULL;
	struct lora_gen_opts o = { .seed = 1, .dtype = GGML_TYPE_F32 };
	const char *base_path = NULL, *out = NULL, *format = NULL;
	struct errmsg e = { "" };
	uint64_t v;
	char buf[64];
	int c, r;

	while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0) {
		switch (c) {
		case OPT_BASE:
			base_path = optarg;
			break;
		case OPT_RANK:
			if (parse_u64(optarg, 1u << 16, &v) < 0 || v == 0)
				return fail("--rank: '%s' is not a rank in 1..65536", optarg);
			o.rank = (uint32_t) v;
			break;
		case OPT_ALPHA: {
			char *end;

			o.alpha = strtof(optarg, &end);
			if (!*optarg || *end || !isfinite(o.alpha) || o.alpha <= 0)
				return fail("--alpha: '%s' is not a number > 0", optarg);
			break;
		}
		case OPT_TARGETS:
			if (lora_targets_parse(optarg, &o.targets, &e) < 0)
				return fail("--targets: %s", e.text);
			break;
		case OPT_SEED:
			if (parse_u64(optarg, UINT64_MAX, &o.seed) < 0)
				return fail("--seed: bad number '%s'", optarg);
			break;
		case OPT_DTYPE:
			if (quant_type_from_name(optarg, &o.dtype) < 0 ||
			    (o.dtype != GGML_TYPE_F32 && o.dtype != GGML_TYPE_F16 &&
			     o.dtype != GGML_TYPE_BF16))
				return fail("--dtype: '%s' is not f32, f16 or bf16", optarg);
			break;
		case OPT_FORMAT:
			format = optarg;
			if (strcmp(optarg, "peft") == 0)
				o.format = LORA_FORMAT_PEFT;
			else if (strcmp(optarg, "gguf") == 0)
				o.format = LORA_FORMAT_GGUF;
			else
				return fail("--format: '%s' is not peft or gguf", optarg);
			break;
		case OPT_OUT:
			out = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 1;
		}
	}
	if (optind < argc)
		return fail("unexpected argument '%s'", argv[optind]);
	if (!base_path || !out || !format || o.rank == 0) {
		usage(stderr);
		return fail("%s", "--base, --rank, --format and --out are required");
	}
	r = model_load(base_path, &base, &e);
	if (r < 0) {
		fprintf(stderr, "molly-mkadapter: %s: %s\n", base_path, e.text);
		return 1;
	}
	o.base = base;
	r = lora_gen_write(out, &o, &e);
	if (r < 0) {
		fprintf(stderr, "molly-mkadapter: %s\n", e.text[0] ? e.text : strerror(-r));
		return 1;
	}
	printf("%s: %s LoRA for %s, rank %" PRIu32 ", alpha %g, targets %s, %s, seed %" PRIu64 "\n",
	       out, format, base->name, o.rank, o.alpha > 0 ? (double) o.alpha : (double) o.rank,
	       lora_targets_format(o.targets ? o.targets : (1u << LORA_TARGET_COUNT_) - 1, buf,
				   sizeof(buf)),
	       quant_type_name(o.dtype), o.seed);
	return 0;
}
