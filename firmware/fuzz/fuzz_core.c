/*
 * fuzz_core.c - a long randomised fuzz of the firmware core, against a HAL that checks the
 * safety rules on every call. Build it with -fsanitize=address,undefined (make fuzz).
 *
 *     fuzz_core [INPUTS [SEED]]      (default 1000000 inputs, seed 1)
 *
 * An input is one burst fed to rip_fw_rx_byte(): random bytes, a CRC-valid frame with a random
 * command, length and payload, a frame with an impossible length, a valid frame with one bit
 * flipped, or a well-formed command of the protocol. Between inputs the 1 kHz timer ticks a
 * random number of times. The core is powered on again every 64 inputs. Checked throughout:
 *   - nothing crashes and nothing is undefined (the sanitizers);
 *   - the motor is only ever enabled by a CRC-valid ENGAGE, so never by garbage (and, in the
 *     "garbage only" phase, which sends no valid ENGAGE at all, never);
 *   - the deadman trips on time: while enabled, the last heartbeat is never more than the
 *     deadman timeout old after a tick, and a trip never comes early;
 *   - the motor never gets a voltage beyond the limit, nor any voltage while disabled;
 *   - every reply is a well-formed frame with a valid CRC;
 *   - the motor is never enabled while the emergency-stop input says pressed, and is off
 *     within one tick of a press;
 *   - the motor driver is only touched with the lock held (or from the tick), and the tick
 *     also fires at the points where the main context runs with interrupts on (inside the
 *     HAL calls the core makes outside its lock), as a real interrupt would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/rip_fw.h"
#include "../core/rip_hal.h"

#define MAX_MV 10000
#define REINIT_EVERY 64

static unsigned long long g_rng = 1;
static unsigned long g_now_ms;          /* timer ticks since power-on, as the core counts */
static int g_enabled;                   /* the driver's enable pin */
static int g_mv;                        /* what the driver applies */
static unsigned long g_heartbeat_ms;    /* last enable(true), or voltage set while enabled */
static long g_engage_credits;           /* valid ENGAGE frames fed and not yet acted on */
static int g_garbage_only;
/* Voltages that well-formed SET_VOLTAGE frames asked for (clamped), not yet applied: the
 * motor may only ever get one of these, or 0. */
#define N_VOLTAGE_CREDITS 64
static int g_voltage_credits[N_VOLTAGE_CREDITS];
static unsigned g_n_voltage_credits;
static int g_allowed = 1;               /* the emergency-stop input: released */
static int g_locked;                    /* interrupts off (the core holds its lock) */
static int g_in_tick;
static unsigned long g_input;
static unsigned long g_n_engages, g_n_trips, g_n_replies, g_n_nacks, g_n_bad_frames;

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_core: FAILED at input %lu: %s\n", g_input, what);
    exit(1);
}

static unsigned rnd(unsigned n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return n ? (unsigned)(g_rng % n) : 0u;
}

/* ---- the checking HAL ------------------------------------------------------------------- */

static void tick(unsigned n);
static unsigned long g_deadman_now(void);

rip_irq_state_t rip_hal_irq_lock(void)
{
    if (g_locked) {
        fail("the lock was taken twice (the core never nests it)");
    }
    g_locked = 1;
    return 0;
}

void rip_hal_irq_unlock(rip_irq_state_t state)
{
    (void)state;
    if (!g_locked) {
        fail("unlock without lock");
    }
    g_locked = 0;
}

/* An interrupt may fire here: the main context has interrupts on. */
static void maybe_interrupt(void)
{
    if (g_locked) {
        fail("a HAL call the core makes outside its lock came with the lock held");
    }
    if (!g_in_tick && rnd(4) == 0) {
        tick(1 + rnd(3));
    }
}

static void require_locked(const char *what)
{
    if (!g_locked && !g_in_tick) {
        fail(what);
    }
}

bool rip_hal_motor_allowed(void)
{
    return g_allowed != 0;
}

void rip_hal_encoders_sample(int32_t *arm, int32_t *pendulum, uint32_t *t_us)
{
    maybe_interrupt();
    *arm = (int32_t)(rnd(4001) - 2000);
    *pendulum = (int32_t)rnd(1u << 20) - (1 << 19);
    *t_us = (uint32_t)(g_now_ms * 1000u);
}

bool rip_hal_arm_at_limit(void)
{
    maybe_interrupt();
    return rnd(8) == 0;
}

void rip_hal_motor_enable(bool on)
{
    require_locked("the motor was switched without the lock");
    if (on) {
        if (!g_allowed) {
            fail("the motor was enabled with the emergency stop pressed");
        }
        if (g_garbage_only) {
            fail("the motor was enabled in the garbage-only phase");
        }
        if (g_engage_credits <= 0) {
            fail("the motor was enabled without a valid ENGAGE");
        }
        g_engage_credits--;
        if (g_mv != 0) {
            fail("enabled with a voltage already set");
        }
        g_heartbeat_ms = g_now_ms;
        g_n_engages++;
    }
    g_enabled = on;
}

void rip_hal_motor_set_mv(int16_t millivolts)
{
    require_locked("a voltage was set without the lock");
    if (millivolts > MAX_MV || millivolts < -MAX_MV) {
        fail("a voltage beyond the motor limit reached the driver");
    }
    if (!g_enabled && millivolts != 0) {
        fail("a voltage was set while the driver is disabled");
    }
    if (millivolts != 0) {
        unsigned i;
        for (i = 0; i < g_n_voltage_credits; i++) {
            if (g_voltage_credits[i] == millivolts) {
                break;
            }
        }
        if (i == g_n_voltage_credits) {
            fail("a voltage no well-formed SET_VOLTAGE asked for reached the driver");
        }
        g_voltage_credits[i] = g_voltage_credits[--g_n_voltage_credits];
    }
    if (g_enabled) {
        g_heartbeat_ms = g_now_ms;
    }
    g_mv = millivolts;
}

void rip_hal_uart_write(const uint8_t *data, uint8_t length)
{
    uint16_t crc;
    maybe_interrupt();
    g_n_replies++;
    if (length < 7 || data[0] != RIP_SYNC1 || data[1] != RIP_SYNC2 ||
        data[2] > RIP_MAX_PAYLOAD || length != 7u + data[2]) {
        fail("a malformed reply frame");
    }
    crc = rip_crc16(0xFFFFu, data + 2, (uint8_t)(3u + data[2]));
    if (data[length - 2] != (crc & 0xFFu) || data[length - 1] != (crc >> 8)) {
        fail("a reply with a bad CRC");
    }
    if (!(data[4] & RIP_REPLY_BIT)) {
        fail("a reply without the reply bit");
    }
    if (data[4] == 0xFF) {
        g_n_nacks++;
    }
}

void rip_hal_event(rip_event_t event)
{
    (void)event;
}

/* The core's deadman, read as the harness (not through the core's lock: the harness is the
 * hardware here, and rip_fw_deadman_ms() takes the lock). */
static unsigned long g_deadman_now(void)
{
    int was = g_locked;
    unsigned long ms;
    g_locked = 0;
    ms = rip_fw_deadman_ms();
    g_locked = was;
    return ms;
}

/* ---- inputs ----------------------------------------------------------------------------- */

static void feed(const uint8_t *bytes, unsigned n)
{
    unsigned i;
    for (i = 0; i < n; i++) {
        rip_fw_rx_byte(bytes[i]);
        if (!g_enabled && g_mv != 0) {
            fail("the motor is disabled with a voltage left set");
        }
    }
}

static void tick(unsigned n)
{
    int outer = g_in_tick;
    g_in_tick = 1;
    while (n--) {
        int was = g_enabled;
        g_now_ms++;
        rip_fw_tick_1ms();
        if (was && !g_enabled && g_allowed) {
            g_n_trips++;
            if (g_now_ms - g_heartbeat_ms <= g_deadman_now()) {
                fail("the deadman tripped early");
            }
        }
        if (g_enabled && !g_allowed) {
            fail("still engaged a tick after the emergency stop was pressed");
        }
        if (g_enabled && g_now_ms - g_heartbeat_ms > g_deadman_now()) {
            fail("the deadman did not trip on time");
        }
    }
    g_in_tick = outer;
}

static void send_frame(uint8_t seq, uint8_t cmd, const uint8_t *payload, uint8_t len)
{
    uint8_t frame[RIP_MAX_FRAME];
    uint8_t n = rip_encode_frame(frame, seq, cmd, payload, len);
    if (cmd == RIP_CMD_ENGAGE && len == 0) {
        /* Counted before feeding: the frame's last byte is what engages. */
        g_engage_credits++;
    }
    if (cmd == RIP_CMD_SET_VOLTAGE && len == 2) {
        int mv = (int16_t)(uint16_t)(payload[0] | (payload[1] << 8));
        mv = mv > MAX_MV ? MAX_MV : (mv < -MAX_MV ? -MAX_MV : mv);
        if (g_n_voltage_credits == N_VOLTAGE_CREDITS) {
            g_n_voltage_credits--; /* forget the oldest-ish: stale credits only weaken */
        }
        g_voltage_credits[g_n_voltage_credits++] = mv;
    }
    feed(frame, n);
}

static void one_input(void)
{
    if (g_locked) {
        fail("the core returned with its lock held");
    }
    uint8_t buf[128];
    uint8_t payload[RIP_MAX_PAYLOAD];
    unsigned i, n;
    unsigned kind = rnd(10);
    for (i = 0; i < sizeof payload; i++) {
        payload[i] = (uint8_t)rnd(256);
    }
    switch (kind) {
    case 0:
    case 1: /* random bytes, with sync pairs sprinkled in */
        n = 1 + rnd(sizeof buf);
        for (i = 0; i < n; i++) {
            buf[i] = (uint8_t)rnd(256);
            if (rnd(16) == 0 && i + 1 < n) {
                buf[i++] = RIP_SYNC1;
                buf[i] = RIP_SYNC2;
            }
        }
        feed(buf, n);
        break;
    case 2:
    case 3: { /* a CRC-valid frame with a random command, length and payload */
        uint8_t cmd = (uint8_t)rnd(256);
        uint8_t len = (uint8_t)rnd(RIP_MAX_PAYLOAD + 1);
        if (g_garbage_only && cmd == RIP_CMD_ENGAGE && len == 0) {
            len = 1; /* still CRC-valid, but BAD_LENGTH */
        }
        send_frame((uint8_t)rnd(256), cmd, payload, len);
        break;
    }
    case 4: /* an impossible length, followed by part of a body */
        buf[0] = RIP_SYNC1;
        buf[1] = RIP_SYNC2;
        buf[2] = (uint8_t)(RIP_MAX_PAYLOAD + 1 + rnd(256 - RIP_MAX_PAYLOAD - 1));
        n = 3 + rnd(40);
        for (i = 3; i < n; i++) {
            buf[i] = (uint8_t)rnd(256);
        }
        feed(buf, n);
        break;
    case 5: { /* a valid frame with one bit flipped: dropped, never acted on */
        uint8_t cmd = (uint8_t)(1 + rnd(6));
        uint8_t len = (cmd == RIP_CMD_SET_VOLTAGE || cmd == RIP_CMD_SET_DEADMAN) ? 2 : 0;
        uint8_t m = rip_encode_frame(buf, (uint8_t)rnd(256), cmd, payload, len);
        unsigned bit = 16 + rnd((m - 2u) * 8u); /* not in the sync pair */
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        /* A flip in len can make a longer candidate that swallows what follows; then the
         * flipped frame itself is never complete, which is also correct. */
        feed(buf, m);
        break;
    }
    default: { /* a well-formed command, as a host sends them */
        unsigned c = rnd(g_garbage_only ? 5 : 6);
        static const uint8_t cmds[6] = {RIP_CMD_GET_STATE, RIP_CMD_SET_VOLTAGE,
                                        RIP_CMD_DISENGAGE, RIP_CMD_SET_DEADMAN, RIP_CMD_PING,
                                        RIP_CMD_ENGAGE};
        uint8_t cmd = cmds[c];
        uint8_t len = 0;
        if (cmd == RIP_CMD_SET_VOLTAGE) {
            int mv = (int)rnd(40001) - 20000; /* beyond the limit too */
            payload[0] = (uint8_t)(mv & 0xFF);
            payload[1] = (uint8_t)((mv >> 8) & 0xFF);
            len = 2;
        } else if (cmd == RIP_CMD_SET_DEADMAN) {
            unsigned ms = rnd(4) ? 10 + rnd(200) : rnd(65536);
            payload[0] = (uint8_t)(ms & 0xFF);
            payload[1] = (uint8_t)(ms >> 8);
            len = 2;
        }
        if (rnd(8) == 0) {
            len = (uint8_t)rnd(4); /* a wrong length now and then: 0..3 bytes */
            if (g_garbage_only && cmd == RIP_CMD_ENGAGE && len == 0) {
                len = 1;
            }
        }
        send_frame((uint8_t)rnd(256), cmd, payload, len);
        break;
    }
    }
    tick(rnd(4) ? rnd(8) : rnd(400));
}

int main(int argc, char **argv)
{
    unsigned long inputs = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000ul;
    unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1ull;
    rip_fw_config_t config = {2048, MAX_MV, 100, 9};
    rip_fw_stats_t stats;
    uint8_t crc_check[9] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    if (rip_crc16(0xFFFFu, crc_check, 9) != 0x29B1u) {
        fail("CRC-16/CCITT-FALSE check value");
    }
    g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
    for (g_input = 0; g_input < inputs; g_input++) {
        if (g_input % REINIT_EVERY == 0) {
            if (g_input) {
                rip_fw_get_stats(&stats);
                g_n_bad_frames += stats.bad_frames;
            }
            g_now_ms = 0;
            g_engage_credits = 0;
            g_n_voltage_credits = 0;
            g_enabled = 1; /* init must disable it */
            g_mv = 0;
            /* One power-on in four is a garbage-only phase: no valid ENGAGE is ever sent. */
            g_garbage_only = rnd(4) == 0;
            g_allowed = 1;
            rip_fw_init(&config);
            if (g_enabled) {
                fail("power-on left the motor enabled");
            }
        }
        if (rnd(50) == 0) {
            g_allowed = !g_allowed; /* the emergency stop pressed, or released */
        }
        one_input();
    }
    rip_fw_get_stats(&stats);
    g_n_bad_frames += stats.bad_frames;
    printf("fuzz_core: %lu inputs clean (seed %llu): %lu engages, %lu deadman trips, %lu "
           "replies, %lu NACKs, %lu bad frames dropped\n",
           inputs, seed, g_n_engages, g_n_trips, g_n_replies, g_n_nacks, g_n_bad_frames);
    if (g_n_engages == 0 || g_n_trips == 0 || g_n_nacks == 0 || g_n_bad_frames == 0) {
        fail("the fuzz never reached an engage, a trip, a NACK or a bad frame");
    }
    return 0;
}
