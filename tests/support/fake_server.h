/* fake_server.h — what the tests of the HTTP server share: the engine callbacks of a server
 * whose cluster is healthy and empty, and a client connection to it over loopback. */
#ifndef PRIMA_TEST_FAKE_SERVER_H
#define PRIMA_TEST_FAKE_SERVER_H

#include <stdbool.h>
#include <stdio.h>

/* srv_engine's health, metrics and cluster: always healthy, no metrics, an empty object. */
bool fake_srv_health(void *ctx, void *obj);
void fake_srv_metrics(void *ctx, FILE *f);
void *fake_srv_cluster(void *ctx);

/* A TCP connection to 127.0.0.1:port whose reads give up after recv_timeout_s (so that a
 * server that stops answering fails the test instead of hanging it); fails the test if it
 * cannot connect. */
int fake_srv_dial(int port, int recv_timeout_s);

#endif
