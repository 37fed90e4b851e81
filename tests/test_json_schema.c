/* JSON schemas compiled to grammars (text/json_schema.h): for each schema, JSON texts it
 * allows are matched and texts it forbids are not (the expectations are the schema's meaning,
 * written by hand); unsupported keywords are refused by name; the generic json_object grammar. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "text/grammar.h"
#include "text/json_schema.h"

static bool matches(const grammar *g, const char *s)
{
    grammar_state *st = grammar_state_new(g);
    bool ok = grammar_state_accept(st, s, strlen(s)) && grammar_state_complete(st);
    grammar_state_free(st);
    return ok;
}

static grammar *compile(const char *schema_json, const char *prefix)
{
    cJSON *s = cJSON_Parse(schema_json);
    REQUIRE(s, "bad test schema %s", schema_json);
    char err[256] = "";
    char *gbnf = json_schema_grammar(s, prefix, err, sizeof err);
    cJSON_Delete(s);
    REQUIRE(gbnf, "schema refused: %s: %s", err, schema_json);
    grammar *g = grammar_parse(gbnf, strlen(gbnf), err, sizeof err);
    REQUIRE(g, "its grammar does not parse: %s\n%s", err, gbnf);
    free(gbnf);
    return g;
}

static const struct {
    const char *schema;
    const char *yes[6], *no[6];
} cases[] = {
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
     "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"],\"additionalProperties\":false}",
     {"{\"b\":\"x\"}", "{\"a\":-12,\"b\":\"\"}", "{\"a\":0,\"b\":\"\\u00e9\",\"c\":true}",
      "{\"b\":\"é\", \"c\":false}", "{\"a\": 3,\"b\": \"q\\\"\"}"},
     {"{}", "{\"a\":1}", "{\"b\":1}", "{\"b\":\"x\",}", "{\"b\":\"x\",\"d\":1}", "{\"a\":01,\"b\":\"\"}"}},
    {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":\"null\"}}}",
     {"{}", "{\"x\":1.5e3}", "{\"y\":null}", "{\"x\":-0.25,\"y\":null}"},
     {"{\"y\":null,\"x\":1}", "{\"x\":1.}", "{\"x\":+1}", "{,}", "{\"x\":nul}"}},
    {"{\"enum\":[\"red\",\"green\",3,null]}", {"\"red\"", "3", "null", "\"green\""},
     {"\"blue\"", "\"Red\"", "4", "red"}},
    {"{\"const\":{\"k\":[1,\"two\"]}}", {"{\"k\":[1,\"two\"]}"}, {"{\"k\":[1]}", "{ \"k\":[1,\"two\"]}"}},
    {"{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0},\"minItems\":2,\"maxItems\":3}",
     {"[1,2]", "[0, 5,77]"}, {"[]", "[1]", "[1,2,3,4]", "[1,-2]", "[1,2,]"}},
    {"{\"type\":\"array\"}", {"[]", "[1,\"a\",{\"b\":[null]},true]"}, {"[", "[1,]", "{}"}},
    {"{\"type\":[\"string\",\"null\"],\"format\":\"date\"}", {"\"2024-02-29\"", "null"},
     {"\"2024-13-01\"", "\"24-01-01\"", "\"x\""}},
    {"{\"type\":\"string\",\"format\":\"date-time\"}",
     {"\"2024-02-29T13:05:00Z\"", "\"2024-02-29T23:59:59.123+02:00\""},
     {"\"2024-02-29 13:05:00Z\"", "\"2024-02-29T24:00:00Z\""}},
    {"{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\""},
     {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""}},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", {"\"ab\"", "\"a\\nb\"", "\"αβγ\""},
     {"\"a\"", "\"abcd\""}},
    {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#/$defs/node\"}},"
     "\"required\":[\"n\"]}],\"$defs\":{\"node\":{\"oneOf\":[{\"type\":\"boolean\"},{\"$ref\":\"#\"}]}}}",
     {"7", "{\"n\":true}", "{\"n\":{\"n\":5}}", "{\"n\":{\"n\":{\"n\":false}}}"},
     {"{\"n\":\"x\"}", "{}", "true", "{\"n\":{}}"}},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
     {"{}", "{\"a\":1,\"b\":2}"}, {"{\"a\":\"x\"}", "{\"a\":1,}"}},
    {"{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\",\"nullable\":true}},\"required\":[\"p\",\"q\"]}",
     {"{\"p\":null,\"q\":[1]}", "{\"p\":1,\"q\":\"x\"}"}, {"{\"p\":1}", "{\"q\":1,\"p\":1}"}},
    {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}]}",
     {"[\"a\",true]", "[\"\", false]"}, {"[\"a\"]", "[true,\"a\"]"}},
    {"true", {"1", "\"x\"", "{\"a\":[{}]}"}, {"", "x"}},
};

static void refusals(void)
{
    static const struct { const char *schema, *want; } bad[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "unsupported keyword 'pattern' at #"},
        {"{\"properties\":{\"a\":{\"not\":{}}}}", "unsupported keyword 'not' at #/properties/a"},
        {"{\"type\":\"integer\",\"minimum\":5}", "unsupported value of 'minimum'"},
        {"{\"$ref\":\"http://example.com/s\"}", "'$ref' http://example.com/s at #"},
        {"{\"$ref\":\"#/$defs/missing\"}", "'$ref' #/$defs/missing"},
        {"{\"type\":\"strin\"}", "unknown type 'strin' at #"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "'maxItems' at # is below"},
        {"false", "the schema at # is false"},
        {"{\"allOf\":[{},{}]}", "'allOf' at #: only one schema"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *s = cJSON_Parse(bad[i].schema);
        char err[256] = "";
        char *g = json_schema_grammar(s, NULL, err, sizeof err);
        CHECK(!g && strstr(err, bad[i].want), "%s: got '%s', want '%s'", bad[i].schema,
              g ? "(compiled)" : err, bad[i].want);
        free(g);
        cJSON_Delete(s);
    }
}

int main(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        grammar *g = compile(cases[i].schema, NULL);
        for (int k = 0; k < 6 && cases[i].yes[k]; k++)
            CHECK(matches(g, cases[i].yes[k]), "%s refuses %s", cases[i].schema, cases[i].yes[k]);
        for (int k = 0; k < 6 && cases[i].no[k]; k++)
            CHECK(!matches(g, cases[i].no[k]), "%s allows %s", cases[i].schema, cases[i].no[k]);
        grammar_free(g);
    }
    /* a prefix names every rule: the schema's grammar can sit inside another one */
    cJSON *s = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}");
    char err[256], top[64];
    char *body = json_schema_grammar(s, "fn-x-", err, sizeof err);
    REQUIRE(body, "%s", err);
    CHECK(!strstr(body, "root ::="), "a prefixed grammar defines root");
    char src[8192];
    snprintf(src, sizeof src, "root ::= \"<\" %s \">\"\n%s", json_schema_rule("fn-x-", top, sizeof top), body);
    grammar *g = grammar_parse(src, strlen(src), err, sizeof err);
    REQUIRE(g, "%s\n%s", err, src);
    CHECK(matches(g, "<{\"a\":\"b\"}>") && !matches(g, "{\"a\":\"b\"}"), "the prefixed rule");
    grammar_free(g);
    free(body);
    cJSON_Delete(s);
    const char *obj = json_object_grammar();
    g = grammar_parse(obj, strlen(obj), err, sizeof err);
    REQUIRE(g, "json_object grammar: %s", err);
    CHECK(matches(g, "{\"a\": [1, {\"b\": null}], \"c\":\"\\u0041\"}") && matches(g, "{}"), "json_object");
    CHECK(!matches(g, "[1]") && !matches(g, "{\"a\"}") && !matches(g, "\"x\""), "json_object allows");
    grammar_free(g);
    refusals();
    return test_done();
}
