/* Every case of the chat-template fixtures (fixtures/templates: published templates, and what
 * Python's jinja2 rendered for each conversation, set up as Hugging Face's apply_chat_template
 * sets it up): the rendering byte for byte, or, where jinja2 raised, an error here too, with
 * the template's own message when it was raise_exception's. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support/slurp.h"
#include "test.h"
#include "text/jinja.h"

/* The first byte where a and b differ, for the failure message. */
static size_t diff_at(const char *a, size_t na, const char *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void)
{
    const char *fixtures = test_fixtures();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/templates", fixtures);
    DIR *d = opendir(dir);
    if (!d)
        SKIP("no chat-template fixtures at %s", dir);
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json")) {
            names = realloc(names, (n + 1) * sizeof *names);
            REQUIRE(names, "out of memory");
            names[n++] = strdup(e->d_name);
        }
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    REQUIRE(n > 0, "no cases (*.json) in %s", dir);

    /* strftime_now is pinned to 2026-07-26 00:00 in the fixtures */
    struct tm tm = {.tm_year = 2026 - 1900, .tm_mon = 6, .tm_mday = 26, .tm_isdst = -1};
    time_t now = mktime(&tm);
    int passed = 0;
    for (size_t i = 0; i < n; i++) {
        /* NAME.CASE.json: NAME is everything before the last ".CASE." */
        char base[1024], path[8192];
        size_t len = strlen(names[i]) - 5;
        snprintf(base, sizeof base, "%.*s", (int)len, names[i]);
        char *dot = strrchr(base, '.');
        REQUIRE(dot, "%s: no CASE part in the name", names[i]);
        snprintf(path, sizeof path, "%s/%.*s.jinja", dir, (int)(dot - base), base);
        size_t tlen;
        char *src = slurp(path, &tlen);
        REQUIRE(src, "%s: cannot read", path);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t jlen;
        char *json = slurp(path, &jlen);
        REQUIRE(json, "%s: cannot read", path);
        cJSON *vars = cJSON_Parse(json);
        REQUIRE(vars, "%s: not JSON", path);
        snprintf(path, sizeof path, "%s/%s.txt", dir, base);
        size_t want_len = 0;
        char *want = slurp(path, &want_len);
        snprintf(path, sizeof path, "%s/%s.error.txt", dir, base);
        size_t elen;
        char *want_err = want ? NULL : slurp(path, &elen);
        REQUIRE(want || want_err, "%s: neither .txt nor .error.txt", base);

        jinja_error err;
        jinja_template *t = jinja_parse(src, tlen, &err);
        CHECK(t, "%s: parse: %s", base, err.msg);
        size_t got_len = 0;
        char *got = t ? jinja_render(t, vars, now, &got_len, &err) : NULL;
        bool ok;
        if (want) {
            ok = got && got_len == want_len && !memcmp(got, want, want_len);
            if (t && !got)
                CHECK(false, "%s: render failed: %s", base, err.msg);
            else if (got && !ok) {
                size_t at = diff_at(got, got_len, want, want_len);
                CHECK(false, "%s: differs at byte %zu of %zu (got %zu): got \"%.40s\" want \"%.40s\"", base, at,
                      want_len, got_len, got + at, want + at);
            }
        } else {
            /* "TemplateError: msg" is raise_exception's message; other classes are jinja2's
             * own wording, which need not match: an error is enough */
            const char *te = "TemplateError: ";
            bool raised = !strncmp(want_err, te, strlen(te));
            ok = t && !got && (!raised || (err.raised && !strcmp(err.msg, want_err + strlen(te))));
            CHECK(ok, "%s: want %s, got %s", base, want_err, got ? "a rendering" : err.msg);
        }
        passed += ok;
        free(got);
        jinja_free(t);
        cJSON_Delete(vars);
        free(src);
        free(json);
        free(want);
        free(want_err);
        free(names[i]);
    }
    free(names);
    fprintf(stderr, "%d of %zu chat-template cases as jinja2 renders them\n", passed, n);
    return test_done();
}
