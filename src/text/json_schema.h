/* json_schema.h — a JSON schema as a GBNF grammar (text/grammar.h): the output a client asked
 * for with response_format json_schema, Ollama's `format`, or a tool's parameters.
 *
 * Supported: type (a name or an array of names), properties, required, additionalProperties
 * (false, true, or a schema), enum, const, items, prefixItems, minItems, maxItems, nested
 * objects, anyOf, oneOf, allOf of one schema, $ref to #/$defs/... or #/definitions/... (or #),
 * string minLength and maxLength, pattern-free formats date, time, date-time and uuid, number
 * and integer (minimum 0 for integers), and the annotations (title, description, default,
 * examples, $schema, $id, $comment, deprecated, readOnly, writeOnly). An object's properties
 * come in the order the schema lists them, required ones always, optional ones possibly left
 * out. Any other keyword is refused with its name, since dropping it silently would let
 * through output the client's schema forbids. */
#ifndef PRIMA_JSON_SCHEMA_H
#define PRIMA_JSON_SCHEMA_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* GBNF whose `root` matches what schema allows (JSON, no whitespace beyond single spaces
 * where JSON allows it). Its rules are named with prefix (so that a schema's grammar can be part
 * of a larger one: tool calls), and `root` is defined only when prefix is NULL or empty. A
 * malloc'd text, or NULL with err naming the keyword or the place ("unsupported keyword 'not'
 * at properties.x"). */
char *json_schema_grammar(const cJSON *schema, const char *prefix, char *err, size_t errlen);
/* The rule json_schema_grammar's output starts with for prefix (its top rule), into buf. */
const char *json_schema_rule(const char *prefix, char *buf, size_t cap);

/* GBNF for any JSON object (response_format json_object): `root` an object. Static text. */
const char *json_object_grammar(void);

#endif
