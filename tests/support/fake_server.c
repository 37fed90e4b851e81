/* fake_server.c — see fake_server.h. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "support/fake_server.h"
#include "test.h"

bool fake_srv_health(void *ctx, void *obj)
{
    (void)ctx, (void)obj;
    return true;
}

void fake_srv_metrics(void *ctx, FILE *f)
{
    (void)ctx, (void)f;
}

void *fake_srv_cluster(void *ctx)
{
    (void)ctx;
    return cJSON_CreateObject();
}

int fake_srv_dial(int port, int recv_timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    REQUIRE(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s",
            strerror(errno));
    struct timeval tv = {recv_timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}
