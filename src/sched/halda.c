/* halda.c — one exact integer program per number of rounds k (see halda.h), solved with GLPK. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <glpk.h>

#include "sched/halda.h"

#define MIB (1024.0 * 1024.0)
#define MS 1e3

/* Columns per device, in this order. */
enum { C_W, C_V, C_N, C_G, C_F, C_O, C_U, C_H, C_E, C_R, C_T, C_Z, N_COLS };

/* What one family of programs (one call of solve_all) is allowed to do. */
typedef struct problem {
    const dev_cost *dc;
    int n;
    const sched_model *sm;
    const sched_opts *o;
    bool fit_only;        /* every device in M4 */
    int force_in;         /* device that must compute at least one layer, or -1 */
    double deadline;      /* seconds_now() when the search stops */
    bool *cut;            /* set when the deadline stopped an integer program or skipped one */
} problem;

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int col(int m, int c)
{
    return 1 + m * N_COLS + c;
}

/* The devices that may burst within their CPU quota (cost.h), as bits. */
static uint32_t quota_mask(const problem *pb)
{
    int q[COST_MAX_BURSTING];
    int nq = cost_quota_devices(pb->dc, pb->n, q);
    uint32_t mask = 0;
    for (int i = 0; i < nq; i++)
        mask |= 1u << q[i];
    return mask;
}

/* The "ring has a second device" binary: the head's hop is paid only then. */
static int col_a(const problem *pb)
{
    return 1 + pb->n * N_COLS;
}

/* Rows are added one at a time from (column, coefficient) lists, 1-based as GLPK wants them;
 * the longest is the objective cutoff, over every column. */
#define ROW_MAX (PRIMA_MAX_DEVICES * N_COLS + 1)
typedef struct row {
    int n;
    int ind[1 + ROW_MAX];
    double val[1 + ROW_MAX];
} row;

static void term(row *r, int c, double v)
{
    r->n++;
    r->ind[r->n] = c;
    r->val[r->n] = v;
}

static void add_row(glp_prob *lp, row *r, int type, double lo, double hi)
{
    int i = glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, i, type, lo, hi);
    glp_set_mat_row(lp, i, r->n, r->ind, r->val);
    r->n = 0;
}

static void set_col(glp_prob *lp, int c, int kind, int type, double lo, double hi)
{
    glp_set_col_kind(lp, c, kind);
    if (kind == GLP_BV)
        type = lo == hi ? GLP_FX : GLP_DB;
    glp_set_col_bnds(lp, c, type, lo, hi);
}

/* Memory terms of device m in MiB, as (column, coefficient) lists, for k rounds:
 *   anon = fixed*U + kv*(y - off*G),  page = b*(y - off*G) (+ fixed page, a constant),
 *   y = (k-1)*W + V. */
static void mem_terms(const problem *pb, int m, int k, row *r, double s_anon, double s_page)
{
    const dev_cost *c = &pb->dc[m];
    double b = pb->sm->layer_bytes / MIB, kv = pb->sm->kv_bytes / MIB;
    double off = c->has_gpu && !c->unified ? 1 : 0;
    double per_y = s_anon * kv + s_page * b;
    term(r, col(m, C_U), s_anon * c->fixed_anon / MIB);
    term(r, col(m, C_W), per_y * (k - 1));
    term(r, col(m, C_V), per_y);
    if (off)
        term(r, col(m, C_G), -per_y);
}

/* v * y_cpu, the CPU layers of device m, y_cpu = (k-1) W + V - G. */
static void cpu_layers(row *r, const problem *pb, int m, int k, double v)
{
    term(r, col(m, C_W), v * (k - 1)), term(r, col(m, C_V), v);
    if (pb->dc[m].has_gpu)
        term(r, col(m, C_G), -v);
}

/* Big-M of device m's burst rows: more than its CPU work can be. */
static double burst_m(const problem *pb, int m, int ymax)
{
    return pb->dc[m].cpu_layer * MS * ymax + pb->dc[0].head_time * MS + 1;
}

/* A device under a CPU quota (cost.h) has T, its CPU time in ms, and Z, whether it bursts:
 * T = a y_cpu when Z = 0, T = s a y_cpu when Z = 1 (a = cpu_layer in ms, s its share), and a
 * burst needs the device not to stream (O = 0) and its full-speed work c = s (a y_cpu + the
 * head's work where it is the head) within
 * s P and within s (TPOT - disk stalls) = s (objective - E terms + the head's work). That row
 * needs the whole objective: added once it is set. Every term it counts is fixed by the plan
 * (T by these rows, the head's hop by its own), so no term can be padded to let a device
 * burst; the disk stalls, whose E may exceed them in the program, are left out (cost.h). */
static void quota_rows(const problem *pb, int k, int ymax, glp_prob *lp)
{
    uint32_t quota = quota_mask(pb);
    if (!quota)
        return;
    int nc = glp_get_num_cols(lp);   /* <= ROW_MAX */
    double coef[1 + ROW_MAX];
    row r = {0};
    double head = pb->dc[0].head_time * MS;
    for (int m = 0; m < pb->n; m++) {
        if (!(quota >> m & 1))
            continue;
        const dev_cost *c = &pb->dc[m];
        double s = c->burst, a = c->cpu_layer * MS, big = burst_m(pb, m, ymax);
        double own_head = m == 0 ? head : 0;
        term(&r, col(m, C_Z), 1), term(&r, col(m, C_O), 1);   /* a streaming device: Z = 0 */
        add_row(lp, &r, GLP_UP, 0, 1);
        term(&r, col(m, C_T), 1), cpu_layers(&r, pb, m, k, -a), term(&r, col(m, C_Z), big);
        add_row(lp, &r, GLP_LO, 0, 0);
        term(&r, col(m, C_T), 1), cpu_layers(&r, pb, m, k, -a), term(&r, col(m, C_Z), -big);
        add_row(lp, &r, GLP_UP, 0, 0);
        term(&r, col(m, C_T), 1), cpu_layers(&r, pb, m, k, -s * a);
        add_row(lp, &r, GLP_LO, 0, 0);
        term(&r, col(m, C_T), 1), cpu_layers(&r, pb, m, k, -s * a), term(&r, col(m, C_Z), big);
        add_row(lp, &r, GLP_UP, 0, big);
        cpu_layers(&r, pb, m, k, s * a), term(&r, col(m, C_Z), big);
        add_row(lp, &r, GLP_UP, 0, s * c->burst_period * MS - s * own_head + big);
        for (int i = 1; i <= nc; i++)
            coef[i] = -s * glp_get_obj_coef(lp, i);
        for (int d = 0; d < pb->n; d++)
            coef[col(d, C_E)] = 0;
        coef[col(m, C_W)] += s * a * (k - 1);
        coef[col(m, C_V)] += s * a;
        if (c->has_gpu)
            coef[col(m, C_G)] -= s * a;
        coef[col(m, C_Z)] += big;
        for (int i = 1; i <= nc; i++)
            if (coef[i] != 0)
                term(&r, i, coef[i]);
        add_row(lp, &r, GLP_UP, 0, big + s * head - s * own_head);
    }
}

/* The integer program for exactly k rounds; objective in milliseconds without the head's
 * constant work. */
static glp_prob *build(const problem *pb, int k)
{
    const sched_model *sm = pb->sm;
    int L = sm->n_layer, n = pb->n;
    double b = sm->layer_bytes / MIB, kv = sm->kv_bytes / MIB;
    glp_prob *lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, n * N_COLS + 1);
    row r = {0};
    /* (k-1) * sum(W) <= L - 1 bounds every window, and y = (k-1) W + V <= k W */
    int wmax = k == 1 ? L : (L - 1) / (k - 1) < L ? (L - 1) / (k - 1) : L;
    int ymax = (double)k * wmax < L ? k * wmax : L;
    uint32_t quota = quota_mask(pb);

    for (int m = 0; m < n; m++) {
        const dev_cost *c = &pb->dc[m];
        bool gpu = c->has_gpu;
        bool may_overload = !pb->fit_only && c->disk_bps > 0;
        bool u_fixed = m == 0 || pb->o->fixed_ring;
        double ram = c->ram / MIB, fp = c->fixed_page / MIB, room = PLAN_STREAM_ROOM_LAYERS * b;
        double ahead = pb->o->prefetch ? room : 0;   /* read while the others compute */
        /* a model of experts: a streamed byte costs a token its share of the disk, and none of
         * it is read ahead (cost.h: Disk) */
        double sb = b * sched_stream_share(sm), rd = sched_layer_read(sm) / MIB;
        if (sm->expert_share > 0)
            ahead = 0;
        /* most memory a device can need: bounds the overload flag's row */
        double big = fmax(1, c->fixed_anon / MIB + fp + (kv + b) * ymax - ram);

        set_col(lp, col(m, C_W), GLP_IV, GLP_DB, pb->force_in == m ? 1 : 0, wmax);
        set_col(lp, col(m, C_V), GLP_IV, GLP_DB, 0, wmax);
        set_col(lp, col(m, C_N), GLP_IV, gpu ? GLP_DB : GLP_FX, 0, gpu ? wmax : 0);
        set_col(lp, col(m, C_G), GLP_CV, gpu ? GLP_DB : GLP_FX, 0, gpu ? ymax : 0);
        set_col(lp, col(m, C_F), GLP_BV, 0, 0, 1);
        set_col(lp, col(m, C_O), GLP_BV, 0, 0, may_overload ? 1 : 0);
        set_col(lp, col(m, C_U), GLP_BV, 0, u_fixed || pb->force_in == m ? 1 : 0, 1);
        set_col(lp, col(m, C_H), GLP_BV, 0, 0, gpu ? 1 : 0);
        set_col(lp, col(m, C_E), GLP_CV, may_overload ? GLP_LO : GLP_FX, 0, 0);
        set_col(lp, col(m, C_R), GLP_CV, may_overload ? GLP_DB : GLP_FX, 0, may_overload ? ymax : 0);

        bool burst = quota >> m & 1;
        set_col(lp, col(m, C_T), GLP_CV, burst ? GLP_LO : GLP_FX, 0, 0);
        set_col(lp, col(m, C_Z), GLP_BV, 0, 0, burst ? 1 : 0);

        /* objective: compute on CPU (T under a quota: quota_rows) and GPU, disk, network */
        if (burst) {
            glp_set_obj_coef(lp, col(m, C_T), 1);
            glp_set_obj_coef(lp, col(m, C_G), c->gpu_layer * MS);
            if (m == 0)   /* the head's own work at full speed too */
                glp_set_obj_coef(lp, col(m, C_Z), -(1 - c->burst) * c->head_time * MS);
        } else {
            glp_set_obj_coef(lp, col(m, C_W), c->cpu_layer * MS * (k - 1));
            glp_set_obj_coef(lp, col(m, C_V), c->cpu_layer * MS);
            glp_set_obj_coef(lp, col(m, C_G), (c->gpu_layer - c->cpu_layer) * MS);
        }
        if (may_overload)
            glp_set_obj_coef(lp, col(m, C_E), MIB / c->disk_bps * MS);
        if (m > 0)
            glp_set_obj_coef(lp, col(m, C_U), k * c->hop * MS);

        /* last round: V <= W; F => V = W; V > 0 only after full devices; F monotone */
        term(&r, col(m, C_V), 1), term(&r, col(m, C_W), -1);
        add_row(lp, &r, GLP_UP, 0, 0);
        term(&r, col(m, C_V), 1), term(&r, col(m, C_W), -1), term(&r, col(m, C_F), -wmax);
        add_row(lp, &r, GLP_LO, -wmax, 0);
        if (m > 0) {
            term(&r, col(m, C_F), 1), term(&r, col(m - 1, C_F), -1);
            add_row(lp, &r, GLP_UP, 0, 0);
            term(&r, col(m, C_V), 1), term(&r, col(m - 1, C_F), -wmax);
            add_row(lp, &r, GLP_UP, 0, 0);
        }
        /* a device made to compute owns a layer, y = (k-1) W + V >= 1: a window that the
         * partial last round never reaches would compute nothing */
        if (pb->force_in == m) {
            term(&r, col(m, C_W), k - 1), term(&r, col(m, C_V), 1);
            add_row(lp, &r, GLP_LO, 1, 0);
        }
        /* in the ring <=> computes (a bypassable device with no layers leaves the ring, and
         * one in it owns a layer: a window the partial last round never reaches would only add
         * a hop, which a CPU quota's condition could otherwise take for a longer token) */
        if (!u_fixed) {
            term(&r, col(m, C_W), 1), term(&r, col(m, C_U), -wmax);
            add_row(lp, &r, GLP_UP, 0, 0);
            term(&r, col(m, C_W), k - 1), term(&r, col(m, C_V), 1), term(&r, col(m, C_U), -1);
            add_row(lp, &r, GLP_LO, 0, 0);
        }
        if (m > 0) {   /* the head's hop is paid when any other device is in the ring */
            term(&r, col_a(pb), 1), term(&r, col(m, C_U), -1);
            add_row(lp, &r, GLP_LO, 0, 0);
        }
        /* GPU: N <= W; G = (k-1) N + min(N, V) through H; VRAM */
        if (gpu) {
            double bg = (double)k * wmax;
            term(&r, col(m, C_N), 1), term(&r, col(m, C_W), -1);
            add_row(lp, &r, GLP_UP, 0, 0);
            term(&r, col(m, C_G), 1), term(&r, col(m, C_N), -k);
            add_row(lp, &r, GLP_UP, 0, 0);
            term(&r, col(m, C_G), 1), term(&r, col(m, C_N), -(k - 1)), term(&r, col(m, C_V), -1);
            add_row(lp, &r, GLP_UP, 0, 0);
            term(&r, col(m, C_G), 1), term(&r, col(m, C_N), -k), term(&r, col(m, C_H), -bg);
            add_row(lp, &r, GLP_LO, -bg, 0);
            term(&r, col(m, C_G), 1), term(&r, col(m, C_N), -(k - 1)), term(&r, col(m, C_V), -1);
            term(&r, col(m, C_H), bg);
            add_row(lp, &r, GLP_LO, 0, 0);
            term(&r, col(m, C_G), b + kv);
            add_row(lp, &r, GLP_UP, 0, c->vram / MIB);
        }
        /* memory: O = 0 => everything fits; O = 1 => R resident layers and the streaming room
         * fit beside anon and the head's weights, and the ring stalls for the streamed layers
         * beyond those read ahead, E = sb (y_cpu - R) - ahead (y_cpu = (k-1) W + V - off G) */
        mem_terms(pb, m, k, &r, 1, 1);
        term(&r, col(m, C_O), -big);
        add_row(lp, &r, GLP_UP, 0, ram - fp);
        if (may_overload) {
            double off = c->has_gpu && !c->unified ? 1 : 0;
            term(&r, col(m, C_R), 1), term(&r, col(m, C_W), -(k - 1)), term(&r, col(m, C_V), -1);
            if (off)
                term(&r, col(m, C_G), 1);
            add_row(lp, &r, GLP_UP, 0, 0);
            mem_terms(pb, m, k, &r, 1, 0);
            term(&r, col(m, C_R), b), term(&r, col(m, C_O), room);
            add_row(lp, &r, GLP_UP, 0, ram - fp);
            if (sm->expert_share > 0) {
                /* by expert, a row per piece of miss(phi) = a + c phi (cost.h: Disk): with
                 * phi = (b R - sh y_cpu) / (x y_cpu), x = b - sh the expert bytes of a layer,
                 * E >= share x y_cpu miss(phi) = share (a x y_cpu + c (b R - sh y_cpu)) */
                double pa[SCHED_COVER_POINTS], pc[SCHED_COVER_POINTS];
                int np = sched_miss_pieces(sm, pa, pc);
                double sh = sched_layer_shared(sm) / MIB, x = b - sh, s = sm->expert_share;
                for (int i = 0; i < np; i++) {
                    double per_y = s * (pa[i] * x - pc[i] * sh);
                    term(&r, col(m, C_E), 1), term(&r, col(m, C_R), -s * pc[i] * b);
                    term(&r, col(m, C_W), -per_y * (k - 1)), term(&r, col(m, C_V), -per_y);
                    if (off)
                        term(&r, col(m, C_G), per_y);
                    add_row(lp, &r, GLP_LO, 0, 0);
                }
            } else {
                term(&r, col(m, C_E), 1), term(&r, col(m, C_R), sb), term(&r, col(m, C_O), ahead);
                term(&r, col(m, C_W), -sb * (k - 1)), term(&r, col(m, C_V), -sb);
                if (off)
                    term(&r, col(m, C_G), sb);
                add_row(lp, &r, GLP_LO, 0, 0);
            }
            if (sm->expert_share > 0) {   /* and E >= rd y_cpu - b R: shared parts streamed */
                term(&r, col(m, C_E), 1), term(&r, col(m, C_R), b);
                term(&r, col(m, C_W), -rd * (k - 1)), term(&r, col(m, C_V), -rd);
                if (off)
                    term(&r, col(m, C_G), rd);
                add_row(lp, &r, GLP_LO, 0, 0);
            }
        }
    }
    /* the head's hop: paid when the ring has another device */
    bool alone_possible = n == 1 || !pb->o->fixed_ring;
    set_col(lp, col_a(pb), GLP_BV, 0, n > 1 && !alone_possible ? 1 : 0, n > 1 ? 1 : 0);
    glp_set_obj_coef(lp, col_a(pb), k * pb->dc[0].hop * MS);
    /* ... and only then (a bound the CPU quotas' rows rely on: cost.h) */
    term(&r, col_a(pb), 1);
    for (int m = 1; m < n; m++)
        term(&r, col(m, C_U), -1);
    add_row(lp, &r, GLP_UP, 0, 0);

    /* every layer exactly once; exactly k rounds (the last one not empty) */
    for (int m = 0; m < n; m++)
        term(&r, col(m, C_W), k - 1), term(&r, col(m, C_V), 1);
    add_row(lp, &r, GLP_FX, L, L);
    if (k > 1) {
        for (int m = 0; m < n; m++)
            term(&r, col(m, C_V), 1);
        add_row(lp, &r, GLP_LO, 1, 0);
    }
    quota_rows(pb, k, ymax, lp);
    return lp;
}

/* The LP relaxation's optimum: a lower bound for this k (HUGE_VAL when infeasible). */
static double lp_bound(glp_prob *lp)
{
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    sp.presolve = GLP_ON;
    if (glp_simplex(lp, &sp) != 0 || glp_get_status(lp) != GLP_OPT)
        return HUGE_VAL;
    return glp_get_obj_val(lp);
}

/* Solve exactly, accepting only objectives below cutoff (ms), until the deadline. Returns 1
 * with a plan (the best found when the deadline cut the search), 0 if no plan beats the cutoff
 * (or none was found in time), -1 on solver failure. */
static int solve_ilp(const problem *pb, glp_prob *lp, int k, double cutoff, ring_plan *p)
{
    double left = pb->deadline - seconds_now();
    if (left <= 0) {
        *pb->cut = true;
        return 0;
    }
    if (isfinite(cutoff)) {
        int n = glp_get_num_cols(lp);
        row r = {0};
        for (int c = 1; c <= n; c++)
            if (glp_get_obj_coef(lp, c) != 0)
                term(&r, c, glp_get_obj_coef(lp, c));
        add_row(lp, &r, GLP_UP, 0, cutoff);
    }
    glp_iocp ip;
    glp_init_iocp(&ip);
    ip.msg_lev = GLP_MSG_OFF;
    ip.presolve = GLP_ON;
    ip.tol_int = 1e-9;
    ip.mip_gap = 0;
    ip.tm_lim = left * 1e3 < INT_MAX ? (int)ceil(left * 1e3) : INT_MAX;
    int rc = glp_intopt(lp, &ip);
    if (rc == GLP_ENOPFS || rc == GLP_ENODFS)
        return 0;
    if (rc == GLP_ETMLIM)
        *pb->cut = true;
    else if (rc != 0)
        return -1;
    int st = glp_mip_status(lp);
    if (st == GLP_NOFEAS || (rc == GLP_ETMLIM && st != GLP_FEAS))
        return 0;
    if (st != GLP_OPT && !(rc == GLP_ETMLIM && st == GLP_FEAS))
        return -1;
    memset(p, 0, sizeof *p);
    p->n_dev = pb->n;
    p->n_layer = pb->sm->n_layer;
    p->k = k;
    for (int m = 0; m < pb->n; m++) {
        int w = (int)lround(glp_mip_col_val(lp, col(m, C_W)));
        int v = (int)lround(glp_mip_col_val(lp, col(m, C_V)));
        int g = (int)lround(glp_mip_col_val(lp, col(m, C_N)));
        /* one round: a window larger than its layers only costs memory */
        if (k == 1)
            w = v;
        p->window[m] = w;
        p->gpu_layers[m] = g < w ? g : w;
    }
    return 1;
}

/* No device of the plan reads from disk. */
static bool fits_in_memory(const cost_result *c, int n_dev)
{
    bool fits = true;
    for (int m = 0; m < n_dev; m++)
        fits &= !c->dev[m].overloaded;
    return fits;
}

/* The plan with one layer per round moved from device a to device b, evaluated into *q and *c.
 * False when the move is not one to make: a would be left without a layer on the CPU, b does not
 * compute, the plan is infeasible, or it reads from disk where the plan it starts from (cost)
 * did not while only plans in memory are searched. */
static bool move_layer(const problem *pb, const ring_plan *plan, const cost_result *cost, int a,
                       int b, ring_plan *q, cost_result *c)
{
    if (a == b || plan->window[a] <= 1 || plan->window[b] == 0 ||
        plan->gpu_layers[a] >= plan->window[a])
        return false;
    *q = *plan;
    q->window[a]--;
    q->window[b]++;
    cost_eval(pb->dc, pb->sm, pb->o, q, c);
    return c->feasible && (!pb->fit_only || !fits_in_memory(cost, pb->n) ||
                           fits_in_memory(c, pb->n));
}

/* Relative slack of the incumbent's cutoff for the integer programs with unequal layers: 14 %
 * larger layers at a model's ends moved the 70B-like's predictions on paper-4dev by 4 %. */
#define SIZES_SLACK 0.1

static bool equal_layers(const sched_model *sm)
{
    for (int il = 1; il < sm->n_layer; il++)
        if (sm->layer_size[il] != sm->layer_size[0])
            return false;
    return true;
}

/* The integer programs count every layer at the mean size; cost_eval counts each in memory at
 * its own (a Q4_K_M model's larger layers sit at its ends: on the head and the last device).
 * From a program's plan, one layer at a time moves between two devices that compute while
 * that makes the plan faster as cost_eval predicts it: a local search, so with unequal layers
 * the plan is no longer proven the fastest; with equal layers the programs' plan stands. */
static void refine_sizes(const problem *pb, ring_plan *plan, cost_result *cost)
{
    bool equal = equal_layers(pb->sm);
    for (int step = 0; !equal && step < pb->sm->n_layer; step++) {
        ring_plan best = *plan;
        cost_result bc = *cost;
        for (int a = 0; a < pb->n; a++)
            for (int b = 0; b < pb->n; b++) {
                ring_plan q;
                cost_result c;
                if (move_layer(pb, plan, cost, a, b, &q, &c) && c.tpot < bc.tpot * (1 - 1e-9)) {
                    best = q;
                    bc = c;
                }
            }
        if (!(bc.tpot < cost->tpot))
            return;
        *plan = best;
        *cost = bc;
    }
}

/* Candidate k in order of their LP bound (then k): good plans come first and cut off the rest. */
typedef struct cand {
    int k;
    double lb;
    glp_prob *lp;
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->lb != y->lb)
        return x->lb < y->lb ? -1 : 1;
    return x->k - y->k;
}

/* The best plan over every k (or pb->o->k). Returns 1 with *best, 0 if none, -1 on failure.
 * Equal predictions keep the smaller k, whatever the order of solving. */
static int solve_all(const problem *pb, ring_plan *best, cost_result *best_cost, int *n_ilp)
{
    int k0 = pb->o->k > 0 ? pb->o->k : 1, k1 = pb->o->k > 0 ? pb->o->k : pb->sm->n_layer;
    int nc = k1 - k0 + 1;
    cand *cs = malloc(sizeof *cs * (size_t)nc);
    if (!cs)
        return -1;
    for (int i = 0; i < nc; i++) {
        cs[i].k = k0 + i;
        cs[i].lp = build(pb, cs[i].k);
        cs[i].lb = lp_bound(cs[i].lp);
    }
    qsort(cs, (size_t)nc, sizeof *cs, cand_cmp);
    double head_ms = pb->dc[0].head_time * MS;
    double best_ms = HUGE_VAL;
    /* With unequal layers a program's objective (the mean) is not the plan's cost_eval: it
     * must come within SIZES_SLACK of the incumbent, not beat it, to be solved and refined. */
    double slack = equal_layers(pb->sm) ? 0 : SIZES_SLACK;
    int found = 0;
    for (int i = 0; i < nc && found >= 0; i++) {
        int k = cs[i].k;
        double cutoff = HUGE_VAL;
        if (isfinite(best_ms)) {   /* beat the incumbent, or tie it with a smaller k */
            double tol = 1e-9 * fmax(1, best_ms);
            cutoff = best_ms * (1 + slack) - head_ms + (k < best->k ? tol : -tol);
        }
        if (!(cs[i].lb < cutoff))
            continue;
        ring_plan p;
        (*n_ilp)++;
        int rc = solve_ilp(pb, cs[i].lp, k, cutoff, &p);
        if (rc < 0)
            found = -1;
        if (rc <= 0)
            continue;
        cost_result cr;
        cost_eval(pb->dc, pb->sm, pb->o, &p, &cr);
        if (cr.feasible)
            refine_sizes(pb, &p, &cr);
        if (cr.feasible && (!found || cr.tpot * MS < best_ms - 1e-9 * fmax(1, best_ms) ||
                            (cr.tpot * MS <= best_ms + 1e-9 * fmax(1, best_ms) && k < best->k))) {
            best_ms = cr.tpot * MS;
            *best = p;
            *best_cost = cr;
            found = 1;
        }
    }
    for (int i = 0; i < nc; i++)
        glp_delete_prob(cs[i].lp);
    free(cs);
    return found;
}

/* Why nothing fits: the most layers each device could hold, for the message. */
static void explain_infeasible(const problem *pb, char *why, size_t len)
{
    const sched_model *sm = pb->sm;
    double b = sm->layer_bytes, kv = sm->kv_bytes;
    int n = snprintf(why, len, "no plan: the devices can hold at most");
    int total = 0;
    for (int m = 0; m < pb->n && n < (int)len; m++) {
        const dev_cost *c = &pb->dc[m];
        double room = c->ram - c->fixed_anon;
        double y;
        if (c->disk_bps > 0)   /* streaming: KV cache and the streaming room must fit */
            y = room - c->fixed_page >= PLAN_STREAM_ROOM_LAYERS * b
                    ? (kv > 0 ? (room - c->fixed_page - PLAN_STREAM_ROOM_LAYERS * b) / kv : sm->n_layer) : 0;
        else
            y = (room - c->fixed_page) / (b + kv);
        if (c->has_gpu && b + kv > 0)
            y += c->vram / (b + kv);
        int yi = y < 0 ? 0 : y > sm->n_layer ? sm->n_layer : (int)y;
        total += yi;
        n += snprintf(why + n, len - (size_t)n, "%s %s %d", m ? "," : "", c->name, yi);
    }
    if (n < (int)len)
        snprintf(why + n, len - (size_t)n, total < sm->n_layer
                 ? " of %d layers within their memory budgets"
                 : " layers each, yet no split of the %d layers meets every memory limit", sm->n_layer);
}

/* The device holding every layer of the plan, when that is one device and not the head; -1. */
static int sole_device(const ring_plan *p)
{
    int sole = -1;
    for (int m = 0; m < p->n_dev; m++)
        if (p->window[m] > 0) {
            if (sole >= 0)
                return -1;
            sole = m;
        }
    return sole > 0 ? sole : -1;
}

/* The best plan of device m alone (its own k and GPU layers; disk allowed unless fit_only), as
 * a plan of the whole ring (the others get no layers: bypassed, or forwarding in a fixed ring,
 * whose hops cost_eval then charges), evaluated there. A worker alone decodes on its own and so
 * does the head's work too (cost.h): it is searched as a head. 1 with *p and *c, 0 when there
 * is none, -1 on solver failure. */
static int alone(const problem *ring, int m, bool fit_only, ring_plan *p, cost_result *c,
                 int *n_ilp)
{
    dev_cost as_head = ring->dc[m];
    if (m > 0) {
        as_head.fixed_page += ring->sm->head_page;
        as_head.fixed_anon += ring->sm->head_bytes;
    }
    problem pb = *ring;
    pb.dc = &as_head;
    pb.n = 1;
    pb.fit_only = fit_only;
    pb.force_in = -1;
    ring_plan one;
    int rc = solve_all(&pb, &one, c, n_ilp);
    if (rc <= 0)
        return rc;
    *p = one;
    p->n_dev = ring->n;
    for (int d = 0; d < p->n_dev; d++)
        p->window[d] = p->gpu_layers[d] = 0;
    p->window[m] = one.window[0];
    p->gpu_layers[m] = one.gpu_layers[0];
    p->decode_alone = m > 0;
    cost_eval(ring->dc, ring->sm, ring->o, p, c);
    return c->feasible ? 1 : 0;
}

/* The largest stall a device's disk puts on the ring per token, and which device (-1: none). */
static double largest_stall(const cost_result *c, int n, int *who)
{
    double most = 0;
    *who = -1;
    for (int m = 0; m < n; m++)
        if (c->dev[m].in_ring && c->dev[m].t_disk > most) {
            most = c->dev[m].t_disk;
            *who = m;
        }
    return most;
}

/* halda.h, near ties: from the plan, a layer moves off the device whose disk stalls the ring
 * most while that lowers the largest stall and the plan stays within o->tie of the fastest
 * predicted. */
static void balance(const problem *pb, ring_plan *plan, cost_result *cost)
{
    double limit = cost->tpot * (1 + pb->o->tie);
    for (int step = 0; pb->o->tie > 0 && step < pb->sm->n_layer * pb->n; step++) {
        int a;
        double worst = largest_stall(cost, pb->n, &a), best_worst = worst;
        if (a < 0)
            return;
        ring_plan best = *plan;
        cost_result bc = *cost;
        for (int b = 0; b < pb->n; b++) {
            ring_plan q;
            cost_result c;
            int ignored;
            if (!move_layer(pb, plan, cost, a, b, &q, &c) || c.tpot > limit)
                continue;
            double w = largest_stall(&c, pb->n, &ignored);
            if (w < best_worst * (1 - 1e-9)) {
                best = q;
                bc = c;
                best_worst = w;
            }
        }
        if (!(best_worst < worst))
            return;
        *plan = best;
        *cost = bc;
    }
}

/* halda.h's rules for plans on one device. A worker alone, decoding on its own, is tried for
 * every worker (the integer programs charge a plan on one worker the relay through the head);
 * when the plan ends up on one worker, the head alone (reading from disk if it must) replaces
 * it if faster. Returns 0, or -1 on solver failure. */
static int one_device_rules(const problem *ring, halda_result *r)
{
    for (int m = 1; m < ring->n; m++) {
        ring_plan p;
        cost_result c;
        int rc = alone(ring, m, ring->fit_only, &p, &c, &r->n_ilp);
        if (rc < 0)
            return -1;
        if (rc > 0 && (!ring->fit_only || fits_in_memory(&c, ring->n)) &&
            c.tpot < r->cost.tpot) {
            r->plan = p;
            r->cost = c;
        }
    }
    r->one_device = sole_device(&r->plan);
    r->one_device_tpot = r->relay_tpot = r->head_alone_tpot = 0;
    r->head_alone = false;
    if (r->one_device < 0)
        return 0;
    r->one_device_tpot = r->cost.tpot;
    ring_plan relay = r->plan;
    relay.decode_alone = !relay.decode_alone;
    cost_result c;
    cost_eval(ring->dc, ring->sm, ring->o, &relay, &c);
    double other = c.feasible ? c.tpot : 0;
    /* the integer programs' plan on one worker relays; the rule's decodes there */
    r->relay_tpot = r->plan.decode_alone ? other : r->cost.tpot;
    if (!r->plan.decode_alone)
        r->one_device_tpot = other;
    ring_plan p;
    int rc = alone(ring, 0, false, &p, &c, &r->n_ilp);
    if (rc <= 0)
        return rc;
    r->head_alone_tpot = c.tpot;
    if (c.tpot < r->cost.tpot) {
        r->plan = p;
        r->cost = c;
        r->head_alone = true;
    }
    return 0;
}

int halda_solve(const dev_cost *dc, int n_dev, const sched_model *sm, const sched_opts *o,
                halda_result *r)
{
    memset(r, 0, sizeof *r);
    r->one_device = -1;
    if (n_dev < 1 || n_dev > PRIMA_MAX_DEVICES || sm->n_layer < 1 || o->k < 0 ||
        o->k > sm->n_layer || !(o->time_limit > 0)) {
        snprintf(r->why, sizeof r->why, "halda: %d devices, %d layers, k = %d, time limit %g s: "
                 "out of range", n_dev, sm->n_layer, o->k, o->time_limit);
        return -1;
    }
    double t0 = seconds_now();
    problem pb = {dc, n_dev, sm, o, !o->allow_disk, -1, t0 + o->time_limit, &r->cut};
    int rc = solve_all(&pb, &r->plan, &r->cost, &r->n_ilp);
    if (rc == 0 && pb.fit_only && !r->cut) {   /* nothing fits in memory: read from disk */
        pb.fit_only = false;
        rc = solve_all(&pb, &r->plan, &r->cost, &r->n_ilp);
    }
    r->seconds = seconds_now() - t0;
    if (rc < 0) {
        snprintf(r->why, sizeof r->why, "halda: the GLPK integer solver failed");
        return -1;
    }
    r->found = rc == 1;
    if (!r->found && r->cut)
        snprintf(r->why, sizeof r->why, "no plan found within the solver's time limit of %g s",
                 o->time_limit);
    else if (!r->found)
        explain_infeasible(&pb, r->why, sizeof r->why);
    if (!r->found)
        return 0;
    balance(&pb, &r->plan, &r->cost);
    if (one_device_rules(&pb, r) < 0) {
        snprintf(r->why, sizeof r->why, "halda: the GLPK integer solver failed");
        return -1;
    }
    r->seconds = seconds_now() - t0;
    r->fits = fits_in_memory(&r->cost, n_dev);
    return 0;
}

/* The TPOT term that grows most from plan a to plan b. */
static const char *largest_increase(const cost_result *a, const cost_result *b)
{
    static const struct {
        const char *name;
        size_t off;
    } terms[] = {
        {"compute", offsetof(cost_result, t_compute)}, {"memory", offsetof(cost_result, t_memory)},
        {"gpu", offsetof(cost_result, t_gpu)},         {"disk", offsetof(cost_result, t_disk)},
        {"network", offsetof(cost_result, t_net)},     {"head", offsetof(cost_result, t_head)},
    };
    const char *best = terms[0].name;
    double most = -HUGE_VAL;
    for (size_t i = 0; i < sizeof terms / sizeof terms[0]; i++) {
        double d = *(const double *)((const char *)b + terms[i].off) -
                   *(const double *)((const char *)a + terms[i].off);
        if (d > most) {
            most = d;
            best = terms[i].name;
        }
    }
    return best;
}

int halda_explain(const dev_cost *dc, int n_dev, const sched_model *sm, const sched_opts *o,
                  halda_result *r)
{
    if (!r->found)
        return 0;
    double deadline = seconds_now() + o->time_limit;   /* for all the explanations */
    for (int m = 1; m < n_dev; m++) {
        r->left_out[m][0] = '\0';
        if (r->plan.window[m] > 0)
            continue;
        /* the same search, with this device made to compute */
        bool cut = false;
        problem pb = {dc, n_dev, sm, o, !o->allow_disk && r->fits, m, deadline, &cut};
        ring_plan p;
        cost_result c;
        int n_ilp = 0;
        int rc = solve_all(&pb, &p, &c, &n_ilp);
        if (rc < 0)
            return -1;
        const char *role = o->fixed_ring ? "forwards only" : "left out";
        if (cut)
            snprintf(r->left_out[m], sizeof r->left_out[m], "%s: the solver's time limit (%g s) "
                     "cut the search for a plan that gives it layers", role, o->time_limit);
        else if (rc == 0)
            snprintf(r->left_out[m], sizeof r->left_out[m], "%s: no plan in which it computes "
                     "a layer meets every memory limit%s", role,
                     pb.fit_only ? " without reading from disk" : "");
        else if ((c.tpot - r->cost.tpot) * MS < 0.005)
            snprintf(r->left_out[m], sizeof r->left_out[m], "%s: giving it layers would not "
                     "make a token faster: the best plan that does predicts %.2f ms per token, "
                     "as this one",
                     role, c.tpot * MS);
        else
            snprintf(r->left_out[m], sizeof r->left_out[m], "%s: giving it layers would slow "
                     "every token: the best plan that does predicts %.2f ms per token, %.2f ms "
                     "more (mostly %s)", role, c.tpot * MS,
                     (c.tpot - r->cost.tpot) * MS, largest_increase(&r->cost, &c));
    }
    return 0;
}

void halda_thread_done(void)
{
    glp_free_env();
}
