/* strbuf: appends keep the bytes and a NUL after them across growth, and a size that would
 * overflow is refused with the buffer unchanged. */
#include <stdint.h>
#include <string.h>

#include "test.h"
#include "util/strbuf.h"

int main(void)
{
    strbuf b = {0};
    char want[5000];
    size_t n = 0;
    /* Pieces of varying length, enough to double several times past the first capacity. */
    for (int i = 0; n + 40 < sizeof want; i++) {
        char piece[40];
        size_t k = (size_t)(i % 37) + 1;
        for (size_t j = 0; j < k; j++)
            piece[j] = (char)('a' + (i + (int)j) % 26);
        REQUIRE(strbuf_add(&b, piece, k) == 0, "append %d", i);
        memcpy(want + n, piece, k);
        n += k;
        CHECK(b.len == n, "len %zu, want %zu", b.len, n);
        CHECK(b.cap > b.len && b.p[b.len] == '\0', "no NUL after %zu bytes", b.len);
    }
    CHECK(memcmp(b.p, want, n) == 0, "the bytes differ from what was appended");

    /* The NUL is written, not inherited: spare capacity full of other bytes stays ended. */
    REQUIRE(strbuf_reserve(&b.p, &b.cap, b.len, 100, 256) == 0, "reserve");
    memset(b.p + b.len, '#', b.cap - b.len);
    REQUIRE(strbuf_add(&b, "yz", 2) == 0, "append after reserve");
    n += 2;
    CHECK(b.len == n && b.p[n - 2] == 'y' && b.p[n - 1] == 'z' && b.p[n] == '\0',
          "no NUL after an append into used spare room");

    size_t cap = b.cap;
    char *p = b.p;
    CHECK(strbuf_add(&b, "x", SIZE_MAX - 2) == -1, "an overflowing append was accepted");
    CHECK(strbuf_add(&b, "x", SIZE_MAX / 4) == -1, "an append past SIZE_MAX/4 was accepted");
    CHECK(b.p == p && b.cap == cap && b.len == n, "a refused append changed the buffer");

    /* strbuf_reserve on bare fields: the first capacity, then room without a move. */
    char *q = NULL;
    size_t qcap = 0;
    CHECK(strbuf_reserve(&q, &qcap, 0, 10, 4096) == 0 && q && qcap == 4096, "first cap %zu", qcap);
    CHECK(strbuf_reserve(&q, &qcap, 4000, 95, 4096) == 0 && qcap == 4096, "grew without need");
    CHECK(strbuf_reserve(&q, &qcap, 4000, 96, 4096) == 0 && qcap == 8192, "cap %zu", qcap);
    free(q);
    free(b.p);
    return test_failures ? 1 : 0;
}
