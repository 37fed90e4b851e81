/* The Jinja interpreter (text/jinja.h) on its own: expressions, filters, tests, methods,
 * whitespace control, loops, macros and scoping against what Python's jinja2 3.1 renders with
 * Hugging Face's settings (the expected texts below were rendered by it), and its errors: one
 * line naming the template line, raise_exception's message as given, and the bounds that stop
 * a hostile template (output, steps, depth) without a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "text/jinja.h"

/* strftime_now's time: 2026-07-26 00:00, local */
static time_t pinned_now(void)
{
    struct tm tm = {.tm_year = 2026 - 1900, .tm_mon = 6, .tm_mday = 26, .tm_isdst = -1};
    return mktime(&tm);
}

/* Renders src with vars (JSON text); NULL and *err on an error. */
static char *render(const char *src, const char *vars, jinja_error *err)
{
    jinja_template *t = jinja_parse(src, strlen(src), err);
    if (!t)
        return NULL;
    cJSON *v = cJSON_Parse(vars);
    REQUIRE(v, "bad test variables: %s", vars);
    size_t len = 0;
    char *out = jinja_render(t, v, pinned_now(), &len, err);
    REQUIRE(!out || strlen(out) == len, "the length given is not the text's");
    cJSON_Delete(v);
    jinja_free(t);
    return out;
}

/* want NULL: jinja2 raised on it, and so must the interpreter. */
static const struct { const char *src, *vars, *want; } cases[] = {
    {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }}",
     "{}",
     "7 9 3 -4 1 2 3.5 1024 2.5"},
    {"{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1, 2] + [3] }} {{ 10 / 4 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 100.0 }}",
     "{}",
     "a1NoneTrue ababab [1, 2, 3] 2.5 1e+20 0.30000000000000004 1e-05 100.0"},
    {"{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' in 'abc' }} {{ 2 not in [1, 3] }} {{ 'k' in d }} {{ not 0 }} {{ 1 == 1.0 }} {{ true == 1 }}",
     "{\"d\": {\"k\": 1}}",
     "True False True True True True True True"},
    {"{{ x or 'default' }}|{{ 0 and 1 }}|{{ 'yes' if x else 'no' }}|{{ 'only' if false }}|",
     "{\"x\": \"\"}",
     "default|0|no||"},
    {"{{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ s[-1] }} {{ l[1:3] }} {{ l[::2] }} {{ l[-2] }} {{ l[10] is defined }}",
     "{\"s\": \"h\\u00e9llo\", \"l\": [1, 2, 3, 4, 5]}",
     "\xc3""\xa9""llo h\xc3""\xa9""ll oll\xc3""\xa9""h o [2, 3] [1, 3, 5] 4 False"},
    {"{{ {'a': 1, 'b': [1, 'x', none, true]} }} {{ ('a',) }} {{ (1, 2) }} {{ \"it's\" }} {{ ['q\"uote', \"it's\"] }}",
     "{}",
     "{'a': 1, 'b': [1, 'x', None, True]} ('a',) (1, 2) it's ['q\"uote', \"it's\"]"},
    {"{{ d.a }} {{ d['b'].c }} {{ d.get('z', 'dz') }} {{ d.get('a') }} {{ d.missing }}|{{ d.items() | list }} {{ d.keys() | list }}",
     "{\"d\": {\"a\": 1, \"b\": {\"c\": 2}}}",
     "1 2 dz 1 |[('a', 1), ('b', {'c': 2})] ['a', 'b']"},
    {"{{ '  x y  ' | trim }}|{{ 'xxhixx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}",
     "{}",
     "x y|hi|a|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']"},
    {"{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.upper() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.count('bc') }}",
     "{}",
     "True True bba AB Hello World Hello 2 2"},
    {"{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [1, 2, 2, 3] | unique | list }} {{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }} {{ [1, 2, 3] | sum }} {{ [4, 2, 9] | max }} {{ [4, 2, 9] | min }}",
     "{}",
     "[1, 2, 3] ['A', 'b', 'c'] [1, 2, 3] [3, 2, 1] cba 6 9 2"},
    {"{{ l | selectattr('on') | map(attribute='n') | join(',') }} {{ l | rejectattr('on') | map(attribute='n') | list }} {{ l | selectattr('n', 'equalto', 'b') | list | length }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3] | reject('equalto', 2) | list }}",
     "{\"l\": [{\"n\": \"a\", \"on\": true}, {\"n\": \"b\", \"on\": false}, {\"n\": \"c\", \"on\": true}]}",
     "a,c ['b'] 1 [1, 3] [1, 3]"},
    {"{{ x | default('d') }} {{ '' | default('e', true) }} {{ none | string }} {{ 3 | string }} {{ 'x' | length }} {{ [1, 2] | count }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ [1, 2] | first }} {{ [1, 2] | last }}",
     "{}",
     "d e None 3 1 2 43 0 2.5 3 1 2"},
    {"{{ d | dictsort }} {{ d | items | list }} {{ d | tojson }} {{ d | tojson(indent=2) }} {{ d | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }}",
     "{\"d\": {\"b\": 1, \"a\": [1, 2.5, null, false], \"c\": {}}}",
     "[('a', [1, 2.5, None, False]), ('b', 1), ('c', {})] [('b', 1), ('a', [1, 2.5, None, False]), ('c', {})] {\"b\": 1, \"a\": [1, 2.5, null, false], \"c\": {}} {\n  \"b\": 1,\n  \"a\": [\n    1,\n    2.5,\n    null,\n    false\n  ],\n  \"c\": {}\n} {\"a\": [1, 2.5, null, false], \"b\": 1, \"c\": {}} {\"b\":1,\"a\":[1,2.5,null,false],\"c\":{}}"},
    {"{{ s | tojson }} {{ 'x' | e }} {{ '<a & b>' | escape }} {{ 'one two  three' | wordcount }}",
     "{\"s\": \"\\u00e9\\\"\\\\\\n\\t\\u0001</\"}",
     "\"\xc3""\xa9""\\\"\\\\\\n\\t\\u0001</\" x &lt;a &amp; b&gt; 3"},
    {"{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb\n' | indent(2, true) }}|{{ 'a\n\nb' | indent('> ', blank=true) }}|{{ '' | indent(first=true) }}",
     "{}",
     "a\n  b\n\n  c|  a\n  b\n|a\n> \n> b|    "},
    {"{{ '%s and %s' % ('a', 1) }} {{ '%d%%' % 5 }} {{ 'x' | replace('x', 'y') }} {{ 'ABC' | lower }} {{ 'abc' | upper }} {{ 'abc' is lower }} {{ [1] is sequence }} {{ 1 is number }} {{ true is boolean }} {{ 1.5 is float }} {{ none is none }} {{ {} is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }}",
     "{}",
     "a and 1 5% y abc ABC True True True True True True True True False"},
    {"{{ 4 is divisibleby 2 }} {{ 3 is odd }} {{ 4 is even }} {{ 2 is in [1, 2] }} {{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 1 is lt 0 }} {{ none is sameas none }} {{ x is undefined }} {{ x is not defined }} {{ f is callable }}",
     "{\"f\": 1}",
     "True True True True True True False True True True False"},
    {"<ul>\n  {% for i in items %}\n    <li>{{ i }}</li>\n  {% endfor %}\n</ul>\n",
     "{\"items\": [1, 2]}",
     "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>"},
    {"a  {%- if true -%}  b  {%- endif -%}  c {# comment #}\n d {#- x -#} e\n  {#- y #}\nf",
     "{}",
     "abc  def"},
    {"  {%+ if true %}x{% endif +%}\ny\n{% if true %}\n  {{- 'z' }}\n{% endif %}\n\n",
     "{}",
     "  x\ny\nz\n"},
    {"{% for k, v in d.items() %}{{ loop.index }}:{{ k }}={{ v }}{{ ',' if not loop.last }}{% endfor %}",
     "{\"d\": {\"a\": 1, \"b\": 2}}",
     "1:a=1,2:b=2"},
    {"{% for x in l %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
     "{\"l\": [\"p\", \"q\", \"r\"]}",
     "03True3q;12False3pr;21False3q;"},
    {"{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}",
     "{\"l\": [1, 2, 3]}",
     "2232|empty"},
    {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}|{{ range(3) | list }} {{ range(1, 7, 2) | list }}",
     "{}",
     "0134|[0, 1, 2] [1, 3, 5]"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}|{% set ns = namespace(t=0) %}{% for i in [1, 2, 3] %}{% set ns.t = ns.t + i %}{% endfor %}{{ ns.t }}",
     "{}",
     "231|6"},
    {"{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}{% set block %}  inner {{ a }}\n{% endset %}[{{ block }}]",
     "{}",
     "12(1, 2)[  inner 1\n]"},
    {"{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}",
     "{}",
     "Hi a! Hi b? Hi c."},
    {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}",
     "{}",
     "120"},
    {"{% if x %}1{% elif y %}2{% else %}3{% endif %}{% if not x and y %}4{% endif %}",
     "{\"x\": false, \"y\": 1}",
     "24"},
    {"{{ strftime_now('%Y-%m-%d %B %A %d %b') }}",
     "{}",
     "2026-07-26 July Sunday 26 Jul"},
    {"{{ messages[0]['content'] }}{{ messages[-1].role }}{{ messages | length }}{% for m in messages %}{{ m.role[0] | upper }}{% endfor %}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"U\"}]}",
     "Suser2SU"},
    /* UndefinedError: 'x' is undefined */
    {"{{ x.y }}",
     "{}",
     NULL},
    /* UndefinedError: 'x' is undefined */
    {"{{ x + 1 }}",
     "{}",
     NULL},
    /* SecurityError: access to attribute 'append' of 'list' object is unsafe. */
    {"{{ [1].append(2) }}",
     "{}",
     NULL},
    /* TemplateError: bad 1 */
    {"{{ raise_exception('bad ' ~ 1) }}",
     "{}",
     NULL},
    /* TypeError: unsupported operand type(s) for +: 'int' and 'str' */
    {"{{ 1 + 'a' }}",
     "{}",
     NULL},
    /* UndefinedError: 'str object' has no attribute 'nope' */
    {"{{ 'a'.nope() }}",
     "{}",
     NULL},
    {"{{ none.x }}|{{ none['x'] is defined }}",
     "{}",
     "|False"},
    {"{{ {'a': 1} | items | list }} {{ 'ab' | list }} {{ {'a': 1} | list }} {{ x | items | list }}",
     "{}",
     "[('a', 1)] ['a', 'b'] ['a'] []"},
    {"{{ '\\u00e9\\x41\\n' }}{{ 'a' 'b' }}{{ \"q\\\"\" }}",
     "{}",
     "\xc3""\xa9""A\nabq\""},
    {"{{ 1.0 }} {{ 2.50 }} {{ 1e16 }} {{ 123456789.123 }} {{ 3 / 3 }} {{ -0.0001 }} {{ 10 ** -2 }}",
     "{}",
     "1.0 2.5 1e+16 123456789.123 1.0 -0.0001 0.01"},
    {"{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }} {{ [{'n': 2}, {'n': 1}] | sort(attribute='n') | map(attribute='n') | list }}",
     "{}",
     "[('a', 2), ('b', 1)] [1, 2]"},
    {"{{ loop }}{% for a in [1] %}{% for b in [2] %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{% endfor %}",
     "{}",
     "121"},
    {"{% filter upper %}abc {{ 'd' }}{% endfilter %}",
     "{}",
     "ABC D"},
    {"{{ tools | tojson(indent=4) }}",
     "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"a\": [1, {\"b\": \"\\u00fc\"}], \"e\": []}}}]}",
     "[\n    {\n        \"type\": \"function\",\n        \"function\": {\n            \"name\": \"f\",\n            \"parameters\": {\n                \"a\": [\n                    1,\n                    {\n                        \"b\": \"\xc3""\xbc""\"\n                    }\n                ],\n                \"e\": []\n            }\n        }\n    }\n]"},
    {"{% for x in [1].append %}x{% endfor %}ok {{ d.update is defined }} {{ d.items is defined }}",
     "{\"d\": {}}",
     "ok False True"},
    {"{% set x = {0: 'a', 512: 'b'} %}{% for k, v in x | dictsort %}{{ k }}{{ v }}{% endfor %}{{ x[512] }} {{ 'n' in ('a', 'n') }}",
     "{}",
     "0a512bb True"},
    {"{{ 2.5 | round }} {{ 3.5 | round }} {{ 1.2345 | round(2) }} {{ 1.5 | round(method='floor') }} {{ 1.21 | round(1, 'ceil') }} {{ 7 | round }} {{ -2.5 | round }}",
     "{}",
     "2.0 4.0 1.23 1.0 1.3 7 -2.0"},
    {"{{ '%s-%d' | format('a', 3) }} {{ '%r' % ('x',) }} {{ '%s' % none }}",
     "{}",
     "a-3 'x' None"},
    {"{{ \"they're x-ray (a) {'k': 'v w'}\" | title }}|{{ \"they're x-ray\".title() }}|{{ '\xc3""\x89""VIAN \xc3""\x9f""tra\xc3""\x9f""e' | lower }}|{{ '\xc3""\xa9""vian' | capitalize }}|{{ '' is upper }}{{ '1' is lower }}{{ 'AB1' is upper }}",
     "{}",
     "They're X-Ray (A) {'k': 'v W'}|They'Re X-Ray|\xc3""\xa9""vian \xc3""\x9f""tra\xc3""\x9f""e|\xc3""\x89""vian|FalseFalseTrue"},
    {"{{ (1, 2, 3)[::-1] }} {{ (1, 2, 3)[1:] }} {{ x is eq 1 is false }} {{ {'a': 1} | safe }} {{ true | abs }} {{ 3.0 is odd }}",
     "{\"x\": 2}",
     "(3, 2, 1) (2, 3) True {'a': 1} 1 True"},
    /* TemplateSyntaxError: You cannot chain multiple tests with is */
    {"{{ x is defined is string }}",
     "{}",
     NULL},
    /* TemplateSyntaxError: expected token 'end of statement block', got 'if' */
    {"{% if 1 if true else 0 %}x{% endif %}",
     "{}",
     NULL},
    {"{{ d | tojson(ensure_ascii=true) }} {{ d | tojson(ensure_ascii=false) }}",
     "{\"d\": {\"a\": \"\\u00e9\\ud83d\\ude00x\"}}",
     "{\"a\": \"\\u00e9\\ud83d\\ude00x\"} {\"a\": \"\xc3\xa9\xf0\x9f\x98\x80x\"}"},
    {"{{ 'a<t>b<t>c'.rsplit('<t>', 1) }} {{ 'a b c'.rsplit() }} {{ 'a,b'.rsplit(',') }} {{ '12'.isdigit() }}{{ ''.isdigit() }}{{ 'ab'.isalpha() }}{{ 'a1'.isalnum() }}{{ ' \\n'.isspace() }}{{ 'AB'.isupper() }}{{ 'a1'.islower() }}{{ 'a b'.isalpha() }}",
     "{}",
     "['a<t>b', 'c'] ['a', 'b', 'c'] ['a', 'b'] TrueFalseTrueTrueTrueTrueTrueFalse"},
    {"{{ ['<'] | wordcount }} {{ 'a_b c-d 1.5' | wordcount }} {{ '' % {'a': 1} }}|{{ 'x' % {'a': 1} }}",
     "{}",
     "0 5 |x"},
    {"a\n  {% raw %}{{ x }}{% if %}\n  {% endraw %}\nb {%- raw -%}  c {{ y }}  {%- endraw -%} d",
     "{}",
     "a\n{{ x }}{% if %}\nbc {{ y }}d"},
    /* TypeError: type list doesn't define __round__ method */
    {"{{ [1, 2, 3] | round }}",
     "{}",
     NULL},
};

static void check_against_jinja2(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        jinja_error err;
        char *got = render(cases[i].src, cases[i].vars, &err);
        if (!cases[i].want)
            CHECK(!got, "case %zu (%s) should fail, rendered \"%s\"", i, cases[i].src, got);
        else if (!got)
            CHECK(false, "case %zu (%s): %s", i, cases[i].src, err.msg);
        else
            CHECK(!strcmp(got, cases[i].want), "case %zu (%s):\n got  \"%s\"\n want \"%s\"", i,
                  cases[i].src, got, cases[i].want);
        free(got);
    }
}

/* An error's message, for a template that must fail. */
static const char *error_of(const char *src, const char *vars, jinja_error *err)
{
    char *out = render(src, vars, err);
    CHECK(!out, "%s: rendered \"%s\", expected an error", src, out ? out : "");
    free(out);
    return err->msg;
}

static void check_errors(void)
{
    jinja_error err;
    /* syntax errors: one line, with the template line */
    static const struct { const char *src, *want; } syntax[] = {
        {"a\n{% if x %}\nb", "line 3: unexpected end of template: 'if' (line 2) is not closed"},
        {"{{ 1 + }}", "line 1: expected an expression, found '}}'"},
        {"x\n\n{% endfor %}", "line 3: unexpected 'endfor'"},
        {"{% for x in y %}{% endif %}", "line 1: unexpected 'endif' in for"},
        {"{{ 'abc }}", "line 1: unterminated string"},
        {"{% frobnicate %}", "line 1: unknown or unsupported statement 'frobnicate'"},
        {"{% break %}", "line 1: 'break' outside a loop"},
        {"{{ x", "line 1: unclosed '{{'"},
        {"{# never closed", "line 1: unclosed comment"},
        {"\n{% raw %} x {% endrow %}", "line 2: 'raw' (line 2) is not closed by {% endraw %}"},
        {"{{ a | }}", "line 1: expected a name, found '}}'"},
        {"{{ '\\u12' }}", "line 1: truncated \\u escape in a string"},
        {"{{ 1.00000000000000000000000000000000000000000000000000000000000000000001 }}",
         "line 1: number literal too long"},
    };
    for (size_t i = 0; i < sizeof syntax / sizeof *syntax; i++) {
        jinja_template *t = jinja_parse(syntax[i].src, strlen(syntax[i].src), &err);
        CHECK(!t, "%s parsed", syntax[i].src);
        jinja_free(t);
        CHECK(!strcmp(err.msg, syntax[i].want) && !err.raised && !strchr(err.msg, '\n'),
              "%s: got \"%s\", want \"%s\"", syntax[i].src, err.msg, syntax[i].want);
    }
    /* errors while rendering name their line */
    CHECK(!strcmp(error_of("\n{{ x.y }}", "{}", &err), "line 2: UndefinedError: 'x' is undefined"), "%s", err.msg);
    CHECK(err.line == 2, "line %d", err.line);
    CHECK(!strcmp(error_of("{{ 1 + 'a' }}", "{}", &err),
                  "line 1: unsupported operand type(s) for +: 'int' and 'str'"), "%s", err.msg);
    CHECK(strstr(error_of("{{ m.content.x }}", "{\"m\": {}}", &err), "'dict object' has no attribute 'content'"),
          "%s", err.msg);
    CHECK(strstr(error_of("{{ [1].append(2) }}", "{}", &err), "SecurityError"), "%s", err.msg);
    CHECK(strstr(error_of("{{ 1 | nofilter }}", "{}", &err), "no filter named 'nofilter'"), "%s", err.msg);
    CHECK(strstr(error_of("{{ 1 is notest }}", "{}", &err), "no test named 'notest'"), "%s", err.msg);
    CHECK(strstr(error_of("{% for a, b in [1] %}{% endfor %}", "{}", &err), "cannot unpack"), "%s", err.msg);
    CHECK(strstr(error_of("{% set x.y = 1 %}", "{\"x\": {}}", &err), "non-namespace"), "%s", err.msg);
    CHECK(strstr(error_of("{{ 1 // 0 }}", "{}", &err), "division by zero"), "%s", err.msg);
    CHECK(strstr(error_of("{{ 999999999999999999 * 100 }}", "{}", &err), "integer overflow"), "%s", err.msg);
    CHECK(strstr(error_of("{{ 9223372036854775807 }}", "{}", &err), "integer literal too large"), "%s", err.msg);
    /* raise_exception: its message as the template gave it, and the line */
    error_of("{% if messages[0].role == 'system' %}\n{{ raise_exception('System role not supported') }}{% endif %}",
             "{\"messages\": [{\"role\": \"system\"}]}", &err);
    CHECK(err.raised && !strcmp(err.msg, "System role not supported") && err.line == 2, "raised %d line %d: %s",
          err.raised, err.line, err.msg);
    /* one line, whatever the message holds */
    error_of("{{ raise_exception('two\nlines') }}", "{}", &err);
    CHECK(err.raised && !strcmp(err.msg, "two lines"), "%s", err.msg);
    CHECK(!strchr(error_of("{{ d['a\nb'].c }}", "{\"d\": {}}", &err), '\n'), "%s", err.msg);
}

/* A hostile template ends with an error, not a hang, a crash or all the memory. */
static void check_bounds(void)
{
    jinja_error err;
    CHECK(strstr(error_of("{% for i in range(100000000) %}{% endfor %}", "{}", &err), "runs too long"), "%s", err.msg);
    /* many small loops: the steps or the memory their values take run out, whichever first */
    error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", &err);
    CHECK(strstr(err.msg, "runs too long") || strstr(err.msg, "MiB of memory"), "%s", err.msg);
    CHECK(strstr(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", &err), "nested more than"),
          "%s", err.msg);
    CHECK(strstr(error_of("{{ 'x' * 100000000 }}", "{}", &err), "MiB"), "%s", err.msg);
    CHECK(strstr(error_of("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}"
                          "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}", "{}", &err), "MiB"),
          "%s", err.msg);
    CHECK(strstr(error_of("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}"
                          "{% endfor %}{{ ns.l }}", "{}", &err), "nested more than"), "%s", err.msg);
    /* deeply nested source: refused by the parser, not the stack */
    size_t n = 100000;
    char *deep = malloc(n + 16);
    REQUIRE(deep, "out of memory");
    strcpy(deep, "{{ ");
    memset(deep + 3, '-', n);
    strcpy(deep + 3 + n, "1 }}");
    jinja_template *t = jinja_parse(deep, strlen(deep), &err);
    CHECK(!t && strstr(err.msg, "nested more than"), "%s", err.msg);
    jinja_free(t);
    free(deep);
}

/* jinja2's whitespace rules on their own: trim_blocks, lstrip_blocks, '-' and '+', the final
 * newline, \r\n. */
static void check_whitespace(void)
{
    static const struct { const char *src, *want; } ws[] = {
        {"{% if true %}\nx\n{% endif %}\n", "x\n"},
        {"  {% if true %}x{% endif %}", "x"},
        {"a\n  {% if true %}\n  b\n  {% endif %}\nc", "a\n  b\nc"},
        {"a {{- ' b ' -}} c", "a b c"},
        {"a\r\nb\r\n", "a\nb"},
        {"x\n\n", "x\n"},
        {"  {# c #}\ny", "y"},
        {"{{ 'a' }}\n{{ 'b' }}", "a\nb"},
    };
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
        jinja_error err;
        char *got = render(ws[i].src, "{}", &err);
        CHECK(got && !strcmp(got, ws[i].want), "%zu: got \"%s\", want \"%s\"", i, got ? got : err.msg, ws[i].want);
        free(got);
    }
}

/* Which bytes came from user text (jinja_render_marked): a message's content, through trim,
 * concatenation and slicing, is marked; the template's own text and bos_token (not named as user
 * text) are not; in JSON the string's whole quoted form is. */
static void check_marks(void)
{
    const char *src = "{{ bos_token }}<|s|>{{ messages[0].content | trim }}<|e|>{{ (messages[0].content ~ '!')[2:] }}"
                      "{{ messages[0].content | tojson }}";
    jinja_error err;
    jinja_template *t = jinja_parse(src, strlen(src), &err);
    REQUIRE(t, "%s", err.msg);
    cJSON *v = cJSON_Parse("{\"messages\": [{\"role\": \"user\", \"content\": \" a<|x|>\"}], \"bos_token\": \"<B>\"}");
    static const char *const user_text[] = {"messages", NULL};
    size_t len = 0;
    uint8_t *plain = NULL;
    char *text = jinja_render_marked(t, v, user_text, pinned_now(), &len, &plain, &err);
    REQUIRE(text && plain, "%s", err.msg);
    const char *want = "<B><|s|>a<|x|><|e|><|x|>!\" a<|x|>\"";
    const char *want_marks = "00000000111111000001111101111111111";
    CHECK(len == strlen(want) && !memcmp(text, want, len), "got \"%s\"", text);
    for (size_t i = 0; i < len && i < strlen(want_marks); i++)
        CHECK(plain[i] == (want_marks[i] == '1'), "byte %zu ('%c') marked %d", i, text[i], plain[i]);
    free(text);
    free(plain);
    cJSON_Delete(v);
    jinja_free(t);
}

int main(void)
{
    check_against_jinja2();
    check_errors();
    check_bounds();
    check_whitespace();
    check_marks();
    return test_done();
}
