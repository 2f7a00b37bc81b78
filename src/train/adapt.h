/* adapt.h - the compute-thread count during a run: measured, compared, switched.
 *
 * The thread count decided at the start is the best one for the load seen then. When
 * other processes take cores later (a second job, a notebook), OpenMP's teams wait at
 * every barrier for a thread that is not running, and a step can take several times
 * as long as it would on fewer threads. The controller watches the steps' times, tries
 * another count now and then (sooner when the speed changes), and keeps it only when
 * it is faster by a margin (hysteresis), backing off after each trial that lost so it
 * does not flap. It is pure: the trainer feeds it each step's end time and samples and
 * the other processes' busy cores, and applies what it returns, so tests drive it with
 * recorded times. */
#ifndef STOKE_TRAIN_ADAPT_H
#define STOKE_TRAIN_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

#define ADAPT_WINDOW_MAX 64

/* The tunable constants; adapt_default_params gives the trainer's. */
typedef struct adapt_params {
    int settle_steps;     /* steps skipped after a change (primitives built, caches) */
    int min_steps;        /* a window's least steps ... */
    double min_seconds;   /* ... and least seconds */
    double margin;        /* a trial wins when faster by more than this share (0.05) */
    double first_explore; /* seconds from the start to the first trial */
    double backoff_max;   /* seconds: the longest wait between trials */
    double change;        /* the current count's speed moved by this share: trial now */
    double min_gap;       /* seconds: the least time between two trials */
} adapt_params;

void adapt_default_params(adapt_params *p);

typedef enum adapt_action {
    ADAPT_NONE = 0,
    ADAPT_TRY,    /* set the threads to `threads` for a trial window */
    ADAPT_KEEP,   /* the trial won: `threads` stays (a switch, to be said) */
    ADAPT_REVERT, /* the trial lost: set the threads back to `threads` */
} adapt_action;

typedef struct adapt_result {
    adapt_action action;
    int threads;      /* the count to apply (TRY, KEEP, REVERT) */
    int from;         /* the count before the trial */
    int tried;        /* TRY, KEEP, REVERT: the count of the trial */
    double rate_from; /* samples/s measured at `from` just before the trial */
    double rate_to;   /* samples/s of the trial */
    double others;    /* other processes' busy cores over the trial (NAN unknown) */
    char reason[240]; /* one line: why this action */
} adapt_result;

typedef struct adapt_state {
    adapt_params p;
    int max;           /* the most threads tried */
    int cur;           /* the count running */
    int base;          /* in a trial: the count to return to; 0 = not in a trial */
    double base_rate;  /* samples/s of `base` before the trial */
    double ref_rate;   /* the current count's reference speed (0 = none yet) */
    int settle;        /* steps still to skip */
    double last_t;     /* the end of the last step fed (0 = none) */
    double next_try;   /* time of the next periodic trial */
    double backoff;    /* seconds to the next periodic trial after one that lost */
    double last_try;   /* when the last trial started */
    int toggle;        /* alternates the neighbour tried when there is no hint */
    double others_ref; /* other processes' busy cores when the count was last judged */
    int windows;       /* windows measured at the current count since it was set */
    /* the window being measured: seconds per sample of each step */
    double per_sample[ADAPT_WINDOW_MAX];
    int n;
    double win_seconds;
    double win_others_sum;
    int win_others_n;
    int switches, trials;
} adapt_state;

/* Starts at `threads` at time `now`; counts from 1 to `max` are tried (max: what a
 * quiet machine gets, the start's count may be lower when other processes were busy
 * then). */
void adapt_init(adapt_state *a, const adapt_params *p, int max, int threads, double now);

/* One optimizer step ended at `now` (seconds, steady clock) after `samples` samples;
 * `others` is the other processes' busy cores measured lately (NAN if unknown). Returns
 * what to do; the caller applies res->threads for TRY, KEEP and REVERT. */
adapt_action adapt_step(adapt_state *a, double now, int64_t samples, double others,
                        adapt_result *res);

/* Time passed outside steps (an evaluation, a checkpoint): the next step's time is
 * measured from `now`, not from the last step. */
void adapt_pause(adapt_state *a, double now);

#endif
