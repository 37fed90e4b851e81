/* report.h — Halda's answer for people (text) and programs (JSON): ring order, windows, GPU
 * layers, rounds, devices left out and why, predicted TPOT by term, each device's memory. */
#ifndef PRIMA_REPORT_H
#define PRIMA_REPORT_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "sched/halda.h"

/* When no plan was found, prints why. */
void plan_report_text(FILE *out, const halda_result *r, const dev_cost *dc, int n_dev,
                      const sched_model *sm);
cJSON *plan_report_json(const halda_result *r, const dev_cost *dc, int n_dev, const sched_model *sm);

#endif
