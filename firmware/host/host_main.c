/*
 * host_main.c - the firmware core on a Linux host, behind a pseudo-terminal, driving a plant
 * simulated in C (plant.c). Started like the Python emulator (rip_control/rig/emulator.py),
 * normally through `python -m rip_control.rig.emulator --firmware c`, which reads the rig YAML
 * and passes each parameter as --param NAME=VALUE.
 *
 * The port mirrors a microcontroller: the main thread is the main loop (UART bytes into
 * rip_fw_rx_byte); a timer thread is the 1 kHz timer interrupt (rip_fw_tick_1ms, under the
 * lock that stands in for disabled interrupts). The plant advances in fixed physics steps
 * locked to CLOCK_MONOTONIC, caught up whenever the HAL touches it and at every timer tick.
 *
 * The emergency-stop input is played by signals: SIGUSR1 presses it, SIGUSR2 releases it.
 *
 * --plant-trace TH,AL,TD,AD runs the plant alone, for the tests that compare it with
 * rip_control/rig/dynamics.py: stdin lines "VOLTAGE ENGAGED STEPS", one state line out each.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "../core/rip_fw.h"
#include "../core/rip_hal.h"
#include "plant.h"

#define FIRMWARE_BUILD 2u /* 1 is the Python emulator */
#define HISTORY_SIZE 16384u
#define MAX_PENDING 64u
#define IDLE_WAKE_MS 10
#define STOP_LINGER_S 0.1

/* ---- options ---------------------------------------------------------------------------- */

typedef struct {
    const char *link;
    int deadman_ms;
    long seed;
    int have_seed;
    int rt_priority;
    int cpu;
    double stop_grace_ms;
    int events_stdout;
    const char *events_file;
    /* faults, as FaultConfig in emulator.py */
    long drop_every, garbage_every, garbage_bytes, stall_every;
    double stall_ms, freeze_after_s, exit_after_s, start_after_s;
} options_t;

static options_t g_opt;
static plant_params_t g_params;

/* ---- clock ------------------------------------------------------------------------------ */

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double g_t0; /* power-on */

/* ---- output ----------------------------------------------------------------------------- */

static int g_events_fd = -1;

/* One write per line; if the reader of stdout has gone, carry on with stdout on /dev/null
 * (the firmware must not stop serving because its log reader died). */
static void write_line_fd(int fd, const char *line, size_t n)
{
    if (write(fd, line, n) < 0 && errno == EPIPE && fd == STDOUT_FILENO) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, STDOUT_FILENO);
            close(devnull);
        }
    }
}

static void print_line(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    if ((size_t)n > sizeof line - 2) {
        n = (int)sizeof line - 2;
    }
    line[n++] = '\n';
    write_line_fd(STDOUT_FILENO, line, (size_t)n);
}

static void emit_event(const char *what)
{
    char line[128];
    int n;
    if (!g_opt.events_stdout && g_events_fd < 0) {
        return;
    }
    n = snprintf(line, sizeof line, "EVENT %.6f %s\n", monotonic_s(), what);
    if (n <= 0 || (size_t)n >= sizeof line) {
        return;
    }
    if (g_events_fd >= 0) {
        write_line_fd(g_events_fd, line, (size_t)n);
    }
    if (g_opt.events_stdout) {
        write_line_fd(STDOUT_FILENO, line, (size_t)n);
    }
}

static volatile sig_atomic_t g_stop; /* SIGINT or SIGTERM came */

/* ---- the plant: "hardware" behind the HAL ----------------------------------------------- */

typedef struct {
    double t;
    long arm, pend;
} sample_t;

static pthread_mutex_t g_plant_lock = PTHREAD_MUTEX_INITIALIZER;
static plant_t g_plant;
static double g_sim_t;      /* seconds of simulated time since power-on */
static double g_voltage_v;  /* what the driver applies */
static int g_driver_enabled;
static sample_t g_history[HISTORY_SIZE];
static unsigned g_hist_head, g_hist_len;
static uint64_t g_rng;

static uint64_t rng_next(void)
{
    /* splitmix64 */
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_gauss(void)
{
    double u1 = ((double)(rng_next() >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
    double u2 = (double)(rng_next() >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

static void record_history(void)
{
    long arm, pend;
    double horizon = g_params.sensing_latency_s + 0.1;
    unsigned tail;
    plant_encoder_counts(&g_plant, &arm, &pend);
    tail = (g_hist_head + g_hist_len) % HISTORY_SIZE;
    g_history[tail].t = g_sim_t;
    g_history[tail].arm = arm;
    g_history[tail].pend = pend;
    if (g_hist_len < HISTORY_SIZE) {
        g_hist_len++;
    } else {
        g_hist_head = (g_hist_head + 1) % HISTORY_SIZE;
    }
    while (g_hist_len > 0 && g_history[g_hist_head].t < g_sim_t - horizon) {
        g_hist_head = (g_hist_head + 1) % HISTORY_SIZE;
        g_hist_len--;
    }
}

/* Integrate in fixed steps up to now. Caller holds g_plant_lock. */
static void plant_advance_locked(double now)
{
    double h = 1.0 / g_params.physics_rate_hz;
    double target = now - g_t0;
    while (g_sim_t + h <= target) {
        plant_step(&g_plant, h, g_voltage_v, g_driver_enabled != 0);
        g_sim_t += h;
        if (g_params.sensing_latency_s > 0.0) {
            record_history();
        }
    }
}

/* ---- HAL -------------------------------------------------------------------------------- */

static pthread_mutex_t g_irq_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_ticks; /* timer ticks delivered; under g_irq_lock */
static int g_in_tick;    /* the ticks being delivered may call back into the HAL */

/* Deliver every millisecond tick due by now. A hardware timer never lags; the timer thread
 * can (a loaded machine), so whoever takes the lock first brings the firmware's clock up to
 * date: a heartbeat is never stamped with a stale millisecond. Caller holds g_irq_lock. */
static void catch_up_ticks_locked(void)
{
    uint64_t due = (uint64_t)((monotonic_s() - g_t0) * 1000.0);
    if (g_in_tick) {
        return;
    }
    g_in_tick = 1;
    while (g_ticks < due) {
        g_ticks++;
        rip_fw_tick_1ms();
    }
    g_in_tick = 0;
}

rip_irq_state_t rip_hal_irq_lock(void)
{
    pthread_mutex_lock(&g_irq_lock);
    catch_up_ticks_locked();
    return 0;
}

void rip_hal_irq_unlock(rip_irq_state_t state)
{
    (void)state;
    pthread_mutex_unlock(&g_irq_lock);
}

void rip_hal_encoders_sample(int32_t *arm, int32_t *pendulum, uint32_t *t_us)
{
    double t;
    long a, p;
    pthread_mutex_lock(&g_plant_lock);
    plant_advance_locked(monotonic_s());
    t = g_sim_t;
    if (g_params.sensing_latency_s > 0.0 && g_hist_len > 0) {
        /* the newest sample at least sensing_latency_s old (or the oldest kept) */
        double wanted = g_sim_t - g_params.sensing_latency_s;
        unsigned i;
        t = g_history[g_hist_head].t;
        a = g_history[g_hist_head].arm;
        p = g_history[g_hist_head].pend;
        for (i = 0; i < g_hist_len; i++) {
            const sample_t *e = &g_history[(g_hist_head + i) % HISTORY_SIZE];
            if (e->t > wanted) {
                break;
            }
            t = e->t;
            a = e->arm;
            p = e->pend;
        }
    } else {
        plant_encoder_counts(&g_plant, &a, &p);
    }
    if (g_params.encoder_noise_counts > 0.0) {
        a += lround(rng_gauss() * g_params.encoder_noise_counts);
        p += lround(rng_gauss() * g_params.encoder_noise_counts);
    }
    pthread_mutex_unlock(&g_plant_lock);
    *arm = (int32_t)a;
    *pendulum = (int32_t)p;
    *t_us = (uint32_t)(uint64_t)llround(t * 1e6);
}

bool rip_hal_arm_at_limit(void)
{
    bool at;
    pthread_mutex_lock(&g_plant_lock);
    at = g_plant.at_limit;
    pthread_mutex_unlock(&g_plant_lock);
    return at;
}

void rip_hal_motor_enable(bool on)
{
    pthread_mutex_lock(&g_plant_lock);
    plant_advance_locked(monotonic_s()); /* the old input held up to now */
    g_driver_enabled = on;
    pthread_mutex_unlock(&g_plant_lock);
}

/* The emergency-stop input, played by signals: SIGUSR1 presses it, SIGUSR2 releases it. */
static volatile sig_atomic_t g_stop_input_pressed;

static void on_stop_input(int sig)
{
    g_stop_input_pressed = sig == SIGUSR1;
}

bool rip_hal_motor_allowed(void)
{
    return !g_stop_input_pressed;
}

void rip_hal_motor_set_mv(int16_t millivolts)
{
    pthread_mutex_lock(&g_plant_lock);
    plant_advance_locked(monotonic_s());
    g_voltage_v = millivolts / 1000.0;
    pthread_mutex_unlock(&g_plant_lock);
}

void rip_hal_event(rip_event_t event)
{
    switch (event) {
    case RIP_EVENT_ENGAGED:
        emit_event("engaged command");
        break;
    case RIP_EVENT_DISENGAGED:
        emit_event("disengaged command");
        break;
    case RIP_EVENT_DEADMAN:
        emit_event("disengaged deadman");
        break;
    case RIP_EVENT_STOP_INPUT:
        emit_event("disengaged stop input");
        break;
    }
}

/* ---- UART: the pty master, with fault injection ----------------------------------------- */

typedef struct {
    double send_at;
    uint16_t n;
    uint8_t bytes[RIP_MAX_FRAME + 255];
} pending_t;

static int g_fd = -1;
static long g_faultable, g_dropped;
static pending_t g_pending[MAX_PENDING];
static unsigned g_pending_len;
static int g_faults_active;

static void uart_send_now(const uint8_t *data, size_t n)
{
    int waits = 0;
    while (n > 0) {
        ssize_t w = write(g_fd, data, n);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EAGAIN && waits++ < 10 && !g_stop) {
                struct pollfd p = {g_fd, POLLOUT, 0};
                poll(&p, 1, 5);
                continue;
            }
            return; /* nobody reading (for 50 ms), or nobody at all: a UART drops bytes too */
        }
        data += w;
        n -= (size_t)w;
    }
}

void rip_hal_uart_write(const uint8_t *data, uint8_t length)
{
    pending_t *slot;
    double delay_s = 0.0;
    uint8_t garbage = 0;
    if (g_faults_active) {
        long n = ++g_faultable;
        if (g_opt.drop_every && n % g_opt.drop_every == 0) {
            g_dropped++;
            return;
        }
        if (g_opt.garbage_every && n % g_opt.garbage_every == 0) {
            garbage = (uint8_t)g_opt.garbage_bytes;
        }
        if (g_opt.stall_every && n % g_opt.stall_every == 0) {
            delay_s = g_opt.stall_ms / 1000.0;
        }
    }
    if (delay_s <= 0.0 && g_pending_len == 0) {
        uint8_t buf[255 + RIP_MAX_FRAME];
        unsigned i;
        for (i = 0; i < garbage; i++) {
            buf[i] = (uint8_t)rng_next();
        }
        memcpy(buf + garbage, data, length);
        uart_send_now(buf, (size_t)garbage + length);
        return;
    }
    if (g_pending_len == MAX_PENDING) {
        return; /* a UART's transmit queue overflows too */
    }
    slot = &g_pending[g_pending_len++];
    slot->send_at = monotonic_s() + delay_s;
    slot->n = (uint16_t)(garbage + length);
    {
        unsigned i;
        for (i = 0; i < garbage; i++) {
            slot->bytes[i] = (uint8_t)rng_next();
        }
    }
    memcpy(slot->bytes + garbage, data, length);
}

static void flush_pending(double now)
{
    while (g_pending_len > 0 && g_pending[0].send_at <= now) {
        uart_send_now(g_pending[0].bytes, g_pending[0].n);
        memmove(&g_pending[0], &g_pending[1], (g_pending_len - 1) * sizeof g_pending[0]);
        g_pending_len--;
    }
}

/* ---- the timer "interrupt" -------------------------------------------------------------- */

static volatile sig_atomic_t g_timer_run = 1;

static void timespec_add_ns(struct timespec *ts, long ns)
{
    ts->tv_nsec += ns;
    while (ts->tv_nsec >= 1000000000L) {
        ts->tv_nsec -= 1000000000L;
        ts->tv_sec++;
    }
}

static void *timer_thread(void *arg)
{
    struct timespec next;
    const long period_ns = 1000000L;
    (void)arg;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (g_timer_run) {
        double now;
        timespec_add_ns(&next, period_ns);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {
        }
        now = monotonic_s();
        /* The lock delivers the due ticks (a late wake-up ticks the missed milliseconds
         * too: the firmware clock counts real time, as a hardware timer does). */
        rip_hal_irq_lock();
        rip_hal_irq_unlock(0);
        pthread_mutex_lock(&g_plant_lock);
        plant_advance_locked(now);
        pthread_mutex_unlock(&g_plant_lock);
    }
    return NULL;
}

/* ---- signals, link ---------------------------------------------------------------------- */

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static int make_link(const char *link, const char *device)
{
    char tmp[4096];
    const char *slash = strrchr(link, '/');
    int n;
    if (slash) {
        n = snprintf(tmp, sizeof tmp, "%.*s/.%s.%d", (int)(slash - link), link, slash + 1,
                     (int)getpid());
    } else {
        n = snprintf(tmp, sizeof tmp, ".%s.%d", link, (int)getpid());
    }
    if (n <= 0 || (size_t)n >= sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    unlink(tmp);
    if (symlink(device, tmp) != 0) {
        return -1;
    }
    return rename(tmp, link); /* atomic: a client never sees a half-made link */
}

static void remove_link(const char *link, const char *device)
{
    char target[4096];
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n >= 0) {
        target[n] = '\0';
        if (strcmp(target, device) == 0) {
            unlink(link);
        }
    }
}

/* ---- serving ---------------------------------------------------------------------------- */

static double g_stop_seen = -1.0, g_off_since = -1.0;

/* A stop was asked, and the host has disengaged or the stop grace has run out (as
 * _Server._stopped in emulator.py). */
static int stopped(void)
{
    double now, grace = g_opt.stop_grace_ms / 1000.0;
    double linger = grace < STOP_LINGER_S ? grace : STOP_LINGER_S;
    if (!g_stop) {
        return 0;
    }
    now = monotonic_s();
    if (g_stop_seen < 0.0) {
        g_stop_seen = now;
    }
    if (rip_fw_engaged()) {
        g_off_since = -1.0;
        return now - g_stop_seen >= grace;
    }
    if (g_off_since < 0.0) {
        g_off_since = now;
    }
    return now - g_off_since >= linger;
}

static void serve(void)
{
    uint8_t buf[4096];
    while (!stopped()) {
        double now = monotonic_s(), since = now - g_t0;
        int timeout_ms = IDLE_WAKE_MS;
        struct pollfd p = {g_fd, POLLIN, 0};
        ssize_t n, i;
        if (g_opt.exit_after_s > 0.0 && since >= g_opt.exit_after_s) {
            _exit(3); /* abrupt by design, as when a USB cable is pulled */
        }
        if (g_opt.freeze_after_s > 0.0 && since >= g_opt.freeze_after_s) {
            /* The serial handler is stuck for good; only the timer interrupt runs on. The
             * UART still takes bytes off the wire (and drops them), so the host never blocks
             * writing, as with a real board. */
            if (poll(&p, 1, IDLE_WAKE_MS) > 0 && (p.revents & POLLIN)) {
                ssize_t dropped = read(g_fd, buf, sizeof buf);
                (void)dropped;
            }
            continue;
        }
        if (g_pending_len > 0) {
            double wait_ms = (g_pending[0].send_at - now) * 1000.0;
            timeout_ms = wait_ms <= 0.0 ? 0 : (int)ceil(wait_ms);
            if (timeout_ms > IDLE_WAKE_MS) {
                timeout_ms = IDLE_WAKE_MS;
            }
        }
        if (g_opt.exit_after_s > 0.0) {
            double left_ms = (g_opt.exit_after_s - since) * 1000.0;
            if (left_ms < timeout_ms) {
                timeout_ms = left_ms <= 0.0 ? 0 : (int)ceil(left_ms);
            }
        }
        if (poll(&p, 1, timeout_ms) < 0 && errno != EINTR) {
            perror("rig_emulator (C firmware): poll");
            return;
        }
        flush_pending(monotonic_s());
        if (!(p.revents & POLLIN)) {
            if (p.revents & (POLLHUP | POLLERR)) {
                /* no process has the slave open: keep serving, without spinning */
                struct timespec ts = {0, 1000000L};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        n = read(g_fd, buf, sizeof buf);
        if (n <= 0) {
            continue; /* EAGAIN, or EIO when no process has the slave open */
        }
        g_faults_active = since >= g_opt.start_after_s;
        for (i = 0; i < n; i++) {
            if (g_opt.freeze_after_s > 0.0 && monotonic_s() - g_t0 >= g_opt.freeze_after_s) {
                break;
            }
            rip_fw_rx_byte(buf[i]);
        }
    }
}

/* ---- plant trace (tests) ---------------------------------------------------------------- */

static int plant_trace(const char *initial)
{
    double x[4] = {0, 0, 0, 0};
    double h = 1.0 / g_params.physics_rate_hz;
    double v;
    int engaged;
    long steps;
    plant_t plant;
    if (sscanf(initial, "%lf,%lf,%lf,%lf", &x[0], &x[1], &x[2], &x[3]) != 4) {
        fprintf(stderr, "rig_emulator (C firmware): error: --plant-trace wants TH,AL,TD,AD, got "
                        "'%s'\n", initial);
        return 2;
    }
    plant_init(&plant, &g_params);
    plant_set_state(&plant, x[0], x[1], x[2], x[3]);
    while (scanf("%lf %d %ld", &v, &engaged, &steps) == 3) {
        long k;
        long arm, pend;
        for (k = 0; k < steps; k++) {
            plant_step(&plant, h, v, engaged != 0);
        }
        plant_encoder_counts(&plant, &arm, &pend);
        printf("%.17g %.17g %.17g %.17g %d %ld %ld\n", plant.theta, plant.alpha,
               plant.theta_dot, plant.alpha_dot, plant.at_limit ? 1 : 0, arm, pend);
    }
    return 0;
}

/* ---- main ------------------------------------------------------------------------------- */

static void usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "rig_emulator (C firmware): error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static double parse_double(const char *name, const char *text, double min)
{
    char *end;
    double v = strtod(text, &end);
    if (*text == '\0' || *end != '\0' || !isfinite(v) || v < min) {
        usage_error("%s must be a finite number >= %g, got '%s'", name, min, text);
    }
    return v;
}

static long parse_long(const char *name, const char *text, long min, long max)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min || v > max) {
        usage_error("%s must be an integer in %ld..%ld, got '%s'", name, min, max, text);
    }
    return v;
}

static void set_param(const char *assignment)
{
    char name[128];
    const char *eq = strchr(assignment, '=');
    if (!eq || (size_t)(eq - assignment) >= sizeof name) {
        usage_error("--param wants NAME=VALUE, got '%s'", assignment);
    }
    memcpy(name, assignment, (size_t)(eq - assignment));
    name[eq - assignment] = '\0';
    /* the one signed parameter (SIGNED in dynamics.py); its bound is checked in Python */
    double min = strcmp(name, "motor_dead_zone_offset_v") == 0 ? -INFINITY : 0.0;
    if (!plant_set_param(&g_params, name, parse_double(name, eq + 1, min))) {
        usage_error("unknown rig parameter '%s'", name);
    }
}

enum {
    OPT_LINK = 256, OPT_PARAM, OPT_DEADMAN, OPT_SEED, OPT_RT, OPT_CPU, OPT_GRACE, OPT_EVENTS,
    OPT_EVENTS_FILE, OPT_DROP, OPT_GARBAGE, OPT_GARBAGE_BYTES, OPT_STALL_EVERY,
    OPT_STALL_MS, OPT_FREEZE, OPT_EXIT, OPT_FAULTS_AFTER, OPT_TRACE, OPT_HELP
};

static const struct option k_options[] = {
    {"link", required_argument, 0, OPT_LINK},
    {"param", required_argument, 0, OPT_PARAM},
    {"deadman-ms", required_argument, 0, OPT_DEADMAN},
    {"seed", required_argument, 0, OPT_SEED},
    {"rt-priority", required_argument, 0, OPT_RT},
    {"cpu", required_argument, 0, OPT_CPU},
    {"stop-grace-ms", required_argument, 0, OPT_GRACE},
    {"events", no_argument, 0, OPT_EVENTS},
    {"events-file", required_argument, 0, OPT_EVENTS_FILE},
    {"drop-every", required_argument, 0, OPT_DROP},
    {"garbage-every", required_argument, 0, OPT_GARBAGE},
    {"garbage-bytes", required_argument, 0, OPT_GARBAGE_BYTES},
    {"stall-every", required_argument, 0, OPT_STALL_EVERY},
    {"stall-ms", required_argument, 0, OPT_STALL_MS},
    {"freeze-after", required_argument, 0, OPT_FREEZE},
    {"exit-after", required_argument, 0, OPT_EXIT},
    {"faults-after", required_argument, 0, OPT_FAULTS_AFTER},
    {"plant-trace", required_argument, 0, OPT_TRACE},
    {"help", no_argument, 0, OPT_HELP},
    {0, 0, 0, 0},
};

static void parse_args(int argc, char **argv, const char **trace)
{
    int c;
    g_opt.link = "/tmp/rip_rig";
    g_opt.deadman_ms = 100;
    g_opt.rt_priority = 70;
    g_opt.cpu = -1;
    g_opt.garbage_bytes = 16;
    g_opt.events_file = getenv("RIP_EMULATOR_EVENTS");
    while ((c = getopt_long(argc, argv, "", k_options, NULL)) != -1) {
        switch (c) {
        case OPT_LINK: g_opt.link = optarg; break;
        case OPT_PARAM: set_param(optarg); break;
        case OPT_DEADMAN:
            g_opt.deadman_ms = (int)parse_long("--deadman-ms", optarg, RIP_DEADMAN_MIN_MS,
                                               RIP_DEADMAN_MAX_MS);
            break;
        case OPT_SEED: g_opt.seed = parse_long("--seed", optarg, LONG_MIN, LONG_MAX); g_opt.have_seed = 1; break;
        case OPT_RT: g_opt.rt_priority = (int)parse_long("--rt-priority", optarg, 0, 99); break;
        case OPT_CPU: g_opt.cpu = (int)parse_long("--cpu", optarg, -1, 1023); break;
        case OPT_GRACE: g_opt.stop_grace_ms = parse_double("--stop-grace-ms", optarg, 0.0); break;
        case OPT_EVENTS: g_opt.events_stdout = 1; break;
        case OPT_EVENTS_FILE: g_opt.events_file = optarg; break;
        case OPT_DROP: g_opt.drop_every = parse_long("--drop-every", optarg, 0, 1L << 30); break;
        case OPT_GARBAGE: g_opt.garbage_every = parse_long("--garbage-every", optarg, 0, 1L << 30); break;
        case OPT_GARBAGE_BYTES: g_opt.garbage_bytes = parse_long("--garbage-bytes", optarg, 0, 255); break;
        case OPT_STALL_EVERY: g_opt.stall_every = parse_long("--stall-every", optarg, 0, 1L << 30); break;
        case OPT_STALL_MS: g_opt.stall_ms = parse_double("--stall-ms", optarg, 0.0); break;
        case OPT_FREEZE: g_opt.freeze_after_s = parse_double("--freeze-after", optarg, 0.0); break;
        case OPT_EXIT: g_opt.exit_after_s = parse_double("--exit-after", optarg, 0.0); break;
        case OPT_FAULTS_AFTER: g_opt.start_after_s = parse_double("--faults-after", optarg, 0.0); break;
        case OPT_TRACE: *trace = optarg; break;
        case OPT_HELP:
            printf("usage: rip_fw_host [--link PATH] [--param NAME=VALUE ...] [--deadman-ms MS]\n"
                   "  [--seed N] [--rt-priority P] [--cpu N] [--stop-grace-ms MS] [--events]\n"
                   "  [--events-file PATH] [--drop-every N] [--garbage-every N]\n"
                   "  [--garbage-bytes N] [--stall-every N] [--stall-ms MS] [--freeze-after S]\n"
                   "  [--exit-after S] [--faults-after S] | --plant-trace TH,AL,TD,AD\n"
                   "Normally started by: python -m rip_control.rig.emulator --firmware c\n");
            exit(0);
        default: exit(2); /* getopt printed what was wrong */
        }
    }
    if (optind < argc) {
        usage_error("unexpected argument '%s'", argv[optind]);
    }
    if (g_params.physics_rate_hz < 1000.0 || g_params.physics_rate_hz > 100000.0) {
        usage_error("physics_rate_hz must be in 1000..100000, got %g", g_params.physics_rate_hz);
    }
    if ((g_params.sensing_latency_s + 0.1) * g_params.physics_rate_hz >= HISTORY_SIZE - 1) {
        usage_error("sensing_latency_s %g is too long at %g Hz physics",
                    g_params.sensing_latency_s, g_params.physics_rate_hz);
    }
    if (g_params.max_voltage_v * 1000.0 > 32767.0 || g_params.encoder_counts_per_rev > 65535.0) {
        usage_error("max_voltage_v and encoder_counts_per_rev must fit the protocol's u16 fields");
    }
}

static void realtime_note(char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    if (g_opt.rt_priority > 0) {
        struct sched_param sp;
        memset(&sp, 0, sizeof sp);
        sp.sched_priority = g_opt.rt_priority;
        if (sched_setscheduler(0, SCHED_FIFO, &sp) == 0) {
            n += (size_t)snprintf(out + n, size - n, "SCHED_FIFO %d", g_opt.rt_priority);
        } else {
            n += (size_t)snprintf(out + n, size - n, "SCHED_FIFO %d refused (%s)",
                                  g_opt.rt_priority, strerror(errno));
        }
    } else {
        n += (size_t)snprintf(out + n, size - n, "normal scheduling");
    }
    if (g_opt.cpu >= 0 && n < size) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(g_opt.cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) == 0) {
            snprintf(out + n, size - n, ", cpu %d", g_opt.cpu);
        } else {
            snprintf(out + n, size - n, ", pinning to CPU %d refused (%s)", g_opt.cpu,
                     strerror(errno));
        }
    }
}

int main(int argc, char **argv)
{
    const char *trace = NULL;
    struct sigaction sa;
    sigset_t block, old;
    int master, slave;
    char device[256], rt[256];
    struct termios tio;
    pthread_t timer;
    rip_fw_config_t config;
    rip_fw_stats_t stats;

    /* First: a signal from here on ends in the clean stop below. */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_stop_input;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* The Python launcher blocks them across exec so none is lost; one pending arrives now. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_UNBLOCK, &block, NULL);

    plant_default_params(&g_params);
    parse_args(argc, argv, &trace);
    if (trace) {
        return plant_trace(trace);
    }
    g_rng = g_opt.have_seed ? (uint64_t)g_opt.seed : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    if (g_opt.events_file && *g_opt.events_file) {
        g_events_fd = open(g_opt.events_file, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (g_events_fd < 0) {
            usage_error("cannot open --events-file %s: %s", g_opt.events_file, strerror(errno));
        }
    }

    master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0 ||
        ptsname_r(master, device, sizeof device) != 0) {
        perror("rig_emulator (C firmware): pty");
        return 1;
    }
    slave = open(device, O_RDWR | O_NOCTTY);
    if (slave < 0 || tcgetattr(slave, &tio) != 0) {
        perror("rig_emulator (C firmware): pty slave");
        return 1;
    }
    cfmakeraw(&tio); /* no echo, no line discipline: bytes pass through untouched */
    tcsetattr(slave, TCSANOW, &tio);
    fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    g_fd = master;

    realtime_note(rt, sizeof rt);
    g_t0 = monotonic_s();
    plant_init(&g_plant, &g_params);
    config.counts_per_rev = (uint16_t)g_params.encoder_counts_per_rev;
    config.max_mv = (uint16_t)lround(g_params.max_voltage_v * 1000.0);
    config.deadman_ms = (uint16_t)g_opt.deadman_ms;
    config.fw_build = FIRMWARE_BUILD;
    rip_fw_init(&config);

    /* The timer thread takes no signals: SIGINT/SIGTERM wake the main loop. */
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    if (pthread_create(&timer, NULL, timer_thread, NULL) != 0) {
        perror("rig_emulator (C firmware): timer thread");
        return 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    if (make_link(g_opt.link, device) != 0) {
        fprintf(stderr, "rig_emulator (C firmware): error: cannot link %s to %s: %s\n",
                g_opt.link, device, strerror(errno));
        rip_fw_stop_motor();
        return 1;
    }
    print_line("READY %s %s physics=%.0fHz %s, C firmware", device, g_opt.link,
               g_params.physics_rate_hz, rt);
    serve();

    if (rip_fw_stop_motor()) {
        emit_event("disengaged stopping");
    }
    emit_event("powered down");
    g_timer_run = 0;
    pthread_join(timer, NULL);
    remove_link(g_opt.link, device);
    close(master);
    close(slave);
    rip_fw_get_stats(&stats);
    print_line("rig_emulator (C firmware): stopped after %lu requests, %lu deadman trip(s), %lu "
               "bad frame(s), %ld reply(s) dropped",
               (unsigned long)stats.frames, (unsigned long)stats.deadman_trips,
               (unsigned long)stats.bad_frames, g_dropped);
    return 0;
}
