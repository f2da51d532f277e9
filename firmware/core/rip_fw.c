/*
 * rip_fw.c - the portable firmware core (see rip_fw.h and docs/serial_protocol.md).
 *
 * State written by the timer context (the deadman) is volatile and read or changed by the
 * main context only inside rip_hal_irq_lock(). Everything else is main-context only.
 */
#include "rip_fw.h"

#include <stddef.h>

#include "rip_hal.h"

/* ---- state ------------------------------------------------------------------------------ */

static rip_fw_config_t g_config;

/* shared with the timer context */
static volatile bool g_engaged;
static volatile bool g_deadman_tripped;
static volatile int16_t g_voltage_mv;
static volatile uint32_t g_ms;           /* timer ticks since init */
static volatile uint32_t g_heartbeat_ms; /* g_ms at the last accepted SET_VOLTAGE or ENGAGE */
static volatile uint16_t g_deadman_ms;
static volatile uint32_t g_deadman_trips;

/* main context only */
static bool g_voltage_clamped;
static uint8_t g_last_error;
static uint32_t g_frames;
static uint32_t g_bad_frames;
static uint8_t g_rx[RIP_MAX_FRAME];
static uint8_t g_rx_len;

/* ---- little-endian packing -------------------------------------------------------------- */

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v & 0xFFu);
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    put_u16(p, (uint16_t)(v & 0xFFFFu));
    put_u16(p + 2, (uint16_t)(v >> 16));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | ((uint16_t)p[1] << 8));
}

/* ---- CRC and frames --------------------------------------------------------------------- */

uint16_t rip_crc16(uint16_t crc, const uint8_t *data, uint8_t length)
{
    /* Byte-wise CRC-16/CCITT (poly 0x1021, not reflected) without a table: a few shifts per
     * byte, cheap on an 8-bit core and 512 bytes of flash smaller than the table. */
    uint8_t i;
    for (i = 0; i < length; i++) {
        crc = (uint16_t)((crc >> 8) | (crc << 8));
        crc ^= data[i];
        crc ^= (uint16_t)((crc & 0xFFu) >> 4);
        crc ^= (uint16_t)(crc << 12);
        crc ^= (uint16_t)((crc & 0xFFu) << 5);
    }
    return crc;
}

uint8_t rip_encode_frame(uint8_t *out, uint8_t seq, uint8_t cmd, const uint8_t *payload,
                         uint8_t length)
{
    uint8_t i;
    uint16_t crc;
    if (length > RIP_MAX_PAYLOAD) {
        return 0;
    }
    out[0] = RIP_SYNC1;
    out[1] = RIP_SYNC2;
    out[2] = length;
    out[3] = seq;
    out[4] = cmd;
    for (i = 0; i < length; i++) {
        out[RIP_HEADER_SIZE + i] = payload[i];
    }
    crc = rip_crc16(0xFFFFu, out + 2, (uint8_t)(3u + length));
    put_u16(out + RIP_HEADER_SIZE + length, crc);
    return (uint8_t)(RIP_HEADER_SIZE + length + RIP_CRC_SIZE);
}

/* ---- status ----------------------------------------------------------------------------- */

static uint8_t status_locked(void)
{
    uint8_t s = 0;
    if (g_engaged) {
        s |= RIP_STATUS_ENGAGED;
    }
    if (g_deadman_tripped) {
        s |= RIP_STATUS_DEADMAN_TRIPPED;
    }
    if (g_voltage_clamped) {
        s |= RIP_STATUS_VOLTAGE_CLAMPED;
    }
    return s;
}

uint8_t rip_fw_status(void)
{
    uint8_t s;
    rip_irq_state_t irq = rip_hal_irq_lock();
    s = status_locked();
    rip_hal_irq_unlock(irq);
    if (rip_hal_arm_at_limit()) {
        s |= RIP_STATUS_ARM_LIMIT;
    }
    return s;
}

bool rip_fw_engaged(void)
{
    return g_engaged; /* one byte: atomic */
}

int16_t rip_fw_applied_mv(void)
{
    int16_t mv;
    rip_irq_state_t irq = rip_hal_irq_lock();
    mv = g_engaged ? g_voltage_mv : 0;
    rip_hal_irq_unlock(irq);
    return mv;
}

uint16_t rip_fw_deadman_ms(void)
{
    uint16_t ms;
    rip_irq_state_t irq = rip_hal_irq_lock();
    ms = g_deadman_ms;
    rip_hal_irq_unlock(irq);
    return ms;
}

void rip_fw_get_stats(rip_fw_stats_t *out)
{
    rip_irq_state_t irq = rip_hal_irq_lock();
    out->deadman_trips = g_deadman_trips;
    out->ms = g_ms;
    rip_hal_irq_unlock(irq);
    out->frames = g_frames;
    out->bad_frames = g_bad_frames;
}

/* ---- motor ------------------------------------------------------------------------------ */

/* Motor off, voltage zero. Caller holds the lock (or is the timer context). */
static bool disengage_locked(void)
{
    bool was = g_engaged;
    rip_hal_motor_enable(false); /* first: the drive is cut before any bookkeeping */
    g_engaged = false;
    g_voltage_mv = 0;
    rip_hal_motor_set_mv(0);
    return was;
}

bool rip_fw_stop_motor(void)
{
    bool was;
    rip_irq_state_t irq = rip_hal_irq_lock();
    was = disengage_locked();
    rip_hal_irq_unlock(irq);
    return was;
}

void rip_fw_tick_1ms(void)
{
    g_ms++;
    if (!g_engaged) {
        return;
    }
    if ((uint32_t)(g_ms - g_heartbeat_ms) > g_deadman_ms) {
        (void)disengage_locked();
        g_deadman_tripped = true;
        g_deadman_trips++;
        rip_hal_event(RIP_EVENT_DEADMAN);
    } else if (!rip_hal_motor_allowed()) {
        (void)disengage_locked();
        rip_hal_event(RIP_EVENT_STOP_INPUT);
    }
}

/* ---- requests --------------------------------------------------------------------------- */

static void reply(uint8_t seq, uint8_t cmd, const uint8_t *payload, uint8_t length)
{
    uint8_t frame[RIP_MAX_FRAME];
    uint8_t n = rip_encode_frame(frame, seq, (uint8_t)(cmd | RIP_REPLY_BIT), payload, length);
    rip_hal_uart_write(frame, n);
}

static void nack(uint8_t seq, uint8_t cmd, uint8_t error)
{
    uint8_t payload[2];
    g_last_error = error;
    payload[0] = error;
    payload[1] = cmd;
    reply(seq, RIP_CMD_NACK, payload, 2);
}

static void ack(uint8_t seq, uint8_t cmd)
{
    uint8_t payload[2];
    payload[0] = rip_fw_status();
    payload[1] = g_last_error;
    reply(seq, cmd, payload, 2);
}

static uint8_t request_length(uint8_t cmd)
{
    switch (cmd) {
    case RIP_CMD_SET_VOLTAGE:
    case RIP_CMD_SET_DEADMAN:
        return 2;
    default:
        return 0;
    }
}

static void handle_get_state(uint8_t seq)
{
    uint8_t p[16];
    int32_t arm;
    int32_t pend;
    uint32_t t_us;
    uint8_t status;
    int16_t applied_mv;
    rip_irq_state_t irq;
    rip_hal_encoders_sample(&arm, &pend, &t_us);
    irq = rip_hal_irq_lock(); /* status and voltage from the same instant */
    status = status_locked();
    applied_mv = g_engaged ? g_voltage_mv : 0;
    rip_hal_irq_unlock(irq);
    if (rip_hal_arm_at_limit()) {
        status |= RIP_STATUS_ARM_LIMIT;
    }
    put_u32(p, (uint32_t)arm);
    put_u32(p + 4, (uint32_t)pend);
    put_u32(p + 8, t_us);
    p[12] = status;
    p[13] = g_last_error;
    put_u16(p + 14, (uint16_t)applied_mv);
    g_last_error = RIP_ERR_NONE; /* reported once, then cleared */
    reply(seq, RIP_CMD_GET_STATE, p, sizeof p);
}

static void handle_set_voltage(uint8_t seq, const uint8_t *payload)
{
    uint16_t raw = get_u16(payload);
    int32_t mv = raw >= 0x8000u ? (int32_t)raw - 65536 : (int32_t)raw; /* int16, portably */
    int32_t max = g_config.max_mv;
    rip_irq_state_t irq = rip_hal_irq_lock();
    if (!g_engaged) {
        g_voltage_mv = 0;
        rip_hal_irq_unlock(irq);
        nack(seq, RIP_CMD_SET_VOLTAGE, RIP_ERR_NOT_ENGAGED);
        return;
    }
    g_voltage_clamped = mv > max || mv < -max;
    if (mv > max) {
        mv = max;
    } else if (mv < -max) {
        mv = -max;
    }
    g_voltage_mv = (int16_t)mv;
    rip_hal_motor_set_mv((int16_t)mv);
    g_heartbeat_ms = g_ms; /* the heartbeat */
    rip_hal_irq_unlock(irq);
    ack(seq, RIP_CMD_SET_VOLTAGE);
}

static void handle_engage(uint8_t seq)
{
    rip_irq_state_t irq = rip_hal_irq_lock();
    if (rip_hal_motor_allowed()) {
        bool was = g_engaged;
        g_voltage_mv = 0;
        rip_hal_motor_set_mv(0); /* zero before the driver is enabled */
        g_deadman_tripped = false;
        g_heartbeat_ms = g_ms;
        g_engaged = true;
        rip_hal_motor_enable(true);
        if (!was) {
            rip_hal_event(RIP_EVENT_ENGAGED); /* inside: a trip cannot come before it */
        }
    } /* else the emergency stop is pressed: the ACK's status shows ENGAGED clear */
    rip_hal_irq_unlock(irq);
    ack(seq, RIP_CMD_ENGAGE);
}

static void handle_disengage(uint8_t seq)
{
    if (rip_fw_stop_motor()) {
        rip_hal_event(RIP_EVENT_DISENGAGED);
    }
    ack(seq, RIP_CMD_DISENGAGE);
}

static void handle_set_deadman(uint8_t seq, const uint8_t *payload)
{
    uint16_t ms = get_u16(payload);
    rip_irq_state_t irq;
    if (ms < RIP_DEADMAN_MIN_MS || ms > RIP_DEADMAN_MAX_MS) {
        nack(seq, RIP_CMD_SET_DEADMAN, RIP_ERR_OUT_OF_RANGE);
        return;
    }
    irq = rip_hal_irq_lock();
    g_deadman_ms = ms;
    rip_hal_irq_unlock(irq);
    ack(seq, RIP_CMD_SET_DEADMAN);
}

static void handle_frame(const uint8_t *frame)
{
    uint8_t length = frame[2];
    uint8_t seq = frame[3];
    uint8_t cmd = frame[4];
    const uint8_t *payload = frame + RIP_HEADER_SIZE;
    g_frames++;
    if (cmd < RIP_CMD_PING || cmd > RIP_CMD_SET_DEADMAN) {
        nack(seq, cmd, RIP_ERR_UNKNOWN_COMMAND);
        return;
    }
    if (length != request_length(cmd)) {
        nack(seq, cmd, RIP_ERR_BAD_LENGTH);
        return;
    }
    switch (cmd) {
    case RIP_CMD_PING: {
        uint8_t p[9];
        p[0] = RIP_PROTOCOL_VERSION;
        put_u16(p + 1, rip_fw_deadman_ms());
        put_u16(p + 3, g_config.counts_per_rev);
        put_u16(p + 5, g_config.max_mv);
        put_u16(p + 7, g_config.fw_build);
        reply(seq, cmd, p, sizeof p);
        break;
    }
    case RIP_CMD_GET_STATE:
        handle_get_state(seq);
        break;
    case RIP_CMD_SET_VOLTAGE:
        handle_set_voltage(seq, payload);
        break;
    case RIP_CMD_ENGAGE:
        handle_engage(seq);
        break;
    case RIP_CMD_DISENGAGE:
        handle_disengage(seq);
        break;
    default: /* RIP_CMD_SET_DEADMAN: the range check above leaves nothing else */
        handle_set_deadman(seq, payload);
        break;
    }
}

/* ---- receiving -------------------------------------------------------------------------- */

static void rx_drop(uint8_t n)
{
    uint8_t i;
    for (i = 0; (uint8_t)(i + n) < g_rx_len; i++) {
        g_rx[i] = g_rx[i + n];
    }
    g_rx_len = (uint8_t)(g_rx_len - n);
}

static void rx_bad_frame(void)
{
    g_bad_frames++;
    g_last_error = RIP_ERR_BAD_CRC; /* the host learns of it through last_error */
    rx_drop(1);                      /* a valid frame may start inside the bad one */
}

void rip_fw_rx_byte(uint8_t byte)
{
    /* The buffer holds at most one frame: every byte is processed as it arrives, and a
     * complete frame (or a failed candidate) leaves it at once. */
    g_rx[g_rx_len++] = byte;
    while (g_rx_len > 0) {
        uint8_t length;
        uint8_t total;
        uint16_t crc;
        if (g_rx[0] != RIP_SYNC1) {
            rx_drop(1);
            continue;
        }
        if (g_rx_len < 2) {
            return;
        }
        if (g_rx[1] != RIP_SYNC2) {
            rx_drop(1);
            continue;
        }
        if (g_rx_len < 3) {
            return;
        }
        length = g_rx[2];
        if (length > RIP_MAX_PAYLOAD) {
            rx_bad_frame();
            continue;
        }
        total = (uint8_t)(RIP_HEADER_SIZE + length + RIP_CRC_SIZE);
        if (g_rx_len < total) {
            return;
        }
        crc = rip_crc16(0xFFFFu, g_rx + 2, (uint8_t)(3u + length));
        if (crc != get_u16(g_rx + RIP_HEADER_SIZE + length)) {
            rx_bad_frame();
            continue;
        }
        handle_frame(g_rx);
        rx_drop(total);
    }
}

/* ---- init ------------------------------------------------------------------------------- */

void rip_fw_init(const rip_fw_config_t *config)
{
    rip_irq_state_t irq = rip_hal_irq_lock();
    g_config = *config;
    if (g_config.deadman_ms < RIP_DEADMAN_MIN_MS || g_config.deadman_ms > RIP_DEADMAN_MAX_MS) {
        g_config.deadman_ms = RIP_DEADMAN_DEFAULT_MS;
    }
    (void)disengage_locked();
    g_deadman_tripped = false;
    g_ms = 0;
    g_heartbeat_ms = 0;
    g_deadman_ms = g_config.deadman_ms;
    g_deadman_trips = 0;
    rip_hal_irq_unlock(irq);
    g_voltage_clamped = false;
    g_last_error = RIP_ERR_NONE;
    g_frames = 0;
    g_bad_frames = 0;
    g_rx_len = 0;
}
