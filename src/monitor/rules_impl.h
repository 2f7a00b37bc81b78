/* rules_impl.h - what the diagnosis's files share: the fields and wording of a finding
 * (finding.c) that every rule's check uses, and the checks the table in rules.c names. */
#ifndef STOKE_RULES_IMPL_H
#define STOKE_RULES_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "stoke/monitor.h"

/* ---- The GPUs the job uses (finding.c) ---- */
bool rule_gpu_considered(const stoke_mon_summary *s, int g);
bool rule_any_gpu(const stoke_mon_summary *s);

/* ---- The fields of a finding (finding.c) ---- */
double rule_fig(stoke_finding *f, const char *name, double value, const char *unit);
double rule_change(stoke_finding *f, const char *setting, const char *unit, double current,
                   double suggested, int direction);
void rule_change_to(stoke_finding *f, const char *setting, const char *to);

/* ---- The settings as the watched program knows them (finding.c) ---- */
int rule_suggested_workers(const stoke_mon_summary *s);
bool rule_is_stoke(const stoke_mon_summary *s);
const char *rule_workers_knob(const stoke_mon_summary *s, int n, char *buf, size_t size);
const char *rule_prefetch_knob(const stoke_mon_summary *s, int slots, int workers, char *buf,
                               size_t size);
const char *rule_threads_knob(const stoke_mon_summary *s, int n, char *buf, size_t size);
double rule_current_workers(const stoke_mon_summary *s);
double rule_current_prefetch(const stoke_mon_summary *s);
int rule_more_workers(stoke_finding *f, const stoke_mon_summary *s, int n);
const char *rule_batch_knob(const stoke_mon_summary *s, stoke_finding *f, double factor, char *buf,
                            size_t size);
const char *rule_pack_advice(const stoke_mon_summary *s, stoke_finding *f);
const stoke_stats *rule_data_wait(const stoke_mon_summary *s);

/* ---- The checks of the table's rows ---- */
/* rules_input.c */
bool rule_check_data_wait(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
bool rule_check_input_bound(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
bool rule_check_io_bound(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
bool rule_check_startup(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
/* rules_cpu.c */
bool rule_check_contention(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
bool rule_check_thread_bound(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
bool rule_check_cpu_underused(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
/* rules_gpu.c */
bool rule_check_batch_grow(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
bool rule_check_memory_full(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
bool rule_check_throttle(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
bool rule_check_low_util(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);

/* rules_dist.c */
bool rule_check_rank_straggler(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);
bool rule_check_allreduce_exposed(const stoke_rule *r, const stoke_mon_summary *s,
                                  stoke_finding *f);
bool rule_check_stop_grace(const stoke_rule *r, const stoke_mon_summary *s, stoke_finding *f);

#endif
