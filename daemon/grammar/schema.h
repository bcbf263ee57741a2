/* SPDX-License-Identifier: MIT */
/*
 * schema.h: JSON Schema → GBNF (grammar.h), so that structured outputs run through the same
 * matcher as hand-written grammars.
 *
 * Supported keywords (docs/http.md lists them for clients): type (one or an array of:
 * object, array, string, number, integer, boolean, null), properties, required,
 * additionalProperties (false, true or a schema), items, minItems, maxItems, enum, const,
 * anyOf, minLength, maxLength, minimum, maximum, $ref to "#/$defs/NAME" or
 * "#/definitions/NAME" (not recursive), $defs/definitions, and the annotations title,
 * description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly
 * (ignored). Any other keyword is refused with its name and where it is.
 *
 * The grammar produces a subset of the valid documents, chosen so that every document it
 * produces validates: properties come in the order given (required ones always, optional ones
 * may be left out), no properties beyond those listed are generated when there are listed
 * ones, numbers with bounds have no exponent and fractional parts only between integers
 * inside the bounds, repetition counts above GRAMMAR_MAX_REPEAT are lowered to it.
 *
 * Limits against hostile schemas (each a -E2BIG or -EINVAL with the reason): nesting depth
 * SCHEMA_MAX_DEPTH, SCHEMA_MAX_NODES schema objects visited, SCHEMA_MAX_ENUM values in one
 * enum, SCHEMA_MAX_PROPERTIES per object, a $ref loop, and the grammar's own size limits.
 *
 * Threading: no shared state.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "../basic/errmsg.h"

struct json_object;
struct schema_gbnf;

#define SCHEMA_MAX_DEPTH      32
#define SCHEMA_MAX_NODES      10000
#define SCHEMA_MAX_ENUM       1024
#define SCHEMA_MAX_PROPERTIES 256

int schema_gbnf_new(struct schema_gbnf **ret);
struct schema_gbnf *schema_gbnf_free(struct schema_gbnf *b);
DEFINE_CLEANUP_FUNC(struct schema_gbnf *, schema_gbnf_free, NULL)

/* Adds the rules of one schema (its own $defs resolved against it); the name of the rule
 * that matches a document in *ret_rule (owned by b). -EINVAL/-E2BIG with e: the keyword and
 * the JSON pointer it sits at. */
int schema_gbnf_add(struct schema_gbnf *b, struct json_object *schema, const char **ret_rule,
		    struct errmsg *e);
/* The rule for any JSON value ("value") or object ("object"), added once. */
const char *schema_gbnf_any(struct schema_gbnf *b, bool object_only);
/* Appends raw GBNF (one or more whole rules). */
int schema_gbnf_append(struct schema_gbnf *b, const char *text);
/* Appends s as a GBNF string literal ("..." with escapes) to b's text without a newline. */
int schema_gbnf_literal(struct schema_gbnf *b, const char *s, size_t n);
/* The text so far (owned by b; valid until the next call). */
const char *schema_gbnf_text(struct schema_gbnf *b, size_t *ret_len);

/* One call for the common case: root ::= the schema's rule. *ret malloc'd. */
int schema_to_gbnf(struct json_object *schema, char **ret, size_t *ret_len, struct errmsg *e);
/* The same through a process-wide cache keyed by the SHA-256 of the schema's compact JSON
 * text (64 schemas, least recently used out): a schema is compiled once however often it is
 * sent; its grammar is then found by grammar_parse_cached(). */
int schema_to_gbnf_cached(struct json_object *schema, char **ret, size_t *ret_len,
			  struct errmsg *e);
/* root ::= any JSON object (response_format json_object). */
int schema_json_object_gbnf(char **ret, size_t *ret_len);
