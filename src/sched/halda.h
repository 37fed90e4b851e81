/* halda.h — the layer-to-device assignment: windows, GPU layers, rounds and device selection
 * that minimise the predicted TPOT of cost.h.
 *
 * For each number of rounds k = 1..L, the plans with exactly k rounds (a partial last round
 * included) form one integer linear program; every valid plan has exactly one k, so solving
 * them all exactly (GLPK, branch and bound) and keeping the best gives the optimum over all
 * plans. Per device m the program has
 *   W (window), V (layers in the last round), N (GPU layers per window), G (GPU layers in all),
 *   and binaries F (the last round fills m's whole window), O (overloaded: sets M1-M3 rather
 *   than M4), U (in the ring), H (the last round holds all N GPU layers), plus E (disk bytes).
 * Owned layers y = (k-1) W + V; the F chain encodes that the last round fills the devices in
 * ring order; H makes G = (k-1) N + min(N, V) exact; O and E make the disk term
 * max(0, anon + page - budget) exact with the streaming-room and set rules of cost.h.
 * The paper breaks the cycle "sets depend on the plan, the plan on the sets" by iterating; here
 * the set of each device is a variable of the program, so the solution's sets are consistent by
 * construction and one solve is the fixed point. Device selection is exact too (U): a device is
 * left out exactly when every plan using it is slower. LP bounds prune the k that cannot win.
 *
 * Devices under a CPU quota (cost.h) may burst: each of them (the first COST_MAX_BURSTING)
 * has its CPU time T and a binary Z (bursts), with the two conditions of a burst as big-M rows
 * (one quota period; its share of the objective plus the head's work), so the program picks
 * the fastest consistent set of bursting devices together with the plan, as cost_eval
 * predicts every plan.
 *
 * Unless allow_disk is set, plans in which no device reads from disk are searched first; only if
 * none exists are overloaded devices allowed. Output is deterministic: ties keep the smallest k.
 *
 * Layers of unequal sizes. The programs count every layer at the mean size; cost_eval, which
 * evaluates each program's plan, counts each layer in memory at its own (a Q4_K_M model's layers
 * with Q6_K matrices, at its ends, are 14 % larger). From the best plan, layers move one at a
 * time between two computing devices while cost_eval predicts the move faster: a local search,
 * so with unequal layers the plan is the best found, not proven the fastest.
 *
 * Near ties (o->tie). Plans predicted within o->tie of the fastest are equal: the profiles are
 * not more exact, and the programs would pile a model's overflow on the device whose disk
 * measured fastest by noise. From the fastest plan, a layer moves off the device whose disk
 * stalls the ring most to another computing device while that lowers the largest stall and the
 * plan stays within the tolerance. A disk serves a short overflow faster than a long one (on
 * homogeneous-6dev, six identical devices, the even plan of exo's strategy ran at 670 and 744
 * ms per token where Halda's, predicted 2 % faster, put 8 layers, 5 of them streamed, on the
 * device whose disk measured 634 MB/s against 591-629, and ran at 834 and 883).
 *
 * Plans on one device. A worker holding every layer decodes on its own (no hop per token, the
 * head's work done there: cost.h); the integer programs charge such a plan the relay through
 * the head, so each worker alone is predicted too and taken when faster. When the plan ends up
 * on one worker, the head alone (reading from disk if it must) is predicted as well, and taken
 * when faster. The predictions are kept: on that worker, relayed through the head, the head
 * alone. */
#ifndef PRIMA_HALDA_H
#define PRIMA_HALDA_H

#include <stdbool.h>

#include "sched/cost.h"

typedef struct halda_result {
    bool found;
    char why[320];          /* not found: why no plan exists */
    ring_plan plan;
    cost_result cost;       /* cost_eval of the plan */
    bool fits;              /* no device reads from disk */
    char left_out[PRIMA_MAX_DEVICES][192];  /* why a device computes no layer; "" if it does */
    int n_ilp;              /* integer programs solved (the k not pruned by LP bounds) */
    double seconds;         /* solve time, explanations excluded */
    bool cut;               /* the time limit stopped the search: plan (if found) is the best
                             * one found, not proven the fastest */
    int one_device;         /* the ring's best plan put every layer on this device, not the
                             * head (-1: it did not) ... */
    double one_device_tpot; /* ... predicted so, decoding there on its own */
    double relay_tpot;      /* ... with every token relayed through the head instead */
    double head_alone_tpot; /* ... and the head alone (0: it cannot hold the model) */
    bool head_alone;        /* the head-alone plan was the faster and is the plan */
} halda_result;

/* dc[0] is the head; n_dev devices in ring order. Returns 0 (r->found says whether a plan
 * exists), or -1 on a solver failure (r->why). The search takes at most o->time_limit seconds
 * (give each integer program what is left; start none once it is spent): a search cut short
 * sets r->cut and returns the best plan found so far, or, with none, found = false and a why
 * that names the limit. */
int halda_solve(const dev_cost *dc, int n_dev, const sched_model *sm, const sched_opts *o,
                halda_result *r);

/* Fill r->left_out for every device without layers: whether it cannot hold a layer, or by how
 * much the best plan that uses it would be slower. Solves once more per such device. */
int halda_explain(const dev_cost *dc, int n_dev, const sched_model *sm, const sched_opts *o,
                  halda_result *r);

/* The solver keeps an environment per thread (GLPK's); a thread that solved and ends before
 * the process (a server's engine thread) frees it with this. */
void halda_thread_done(void);

#endif
