/*
 * rip_fw.h - the rig firmware's portable core: docs/serial_protocol.md, version 1.
 *
 * Framing, CRC-16/CCITT-FALSE, every command, the status flags and error codes, the voltage
 * limit and the deadman. C99, no dynamic memory, no floating point, no hardware access: all
 * of that is behind rip_hal.h. One firmware instance per device (state is static).
 *
 * A port's main() looks like:
 *
 *     rip_fw_init(&config);               // motor off, deadman armed, parser empty
 *     enable the 1 kHz timer interrupt    // its handler calls rip_fw_tick_1ms()
 *     for (;;) { while (a byte b arrived) rip_fw_rx_byte(b); }
 *
 * The deadman runs only in rip_fw_tick_1ms(), from the timer interrupt, so a main loop that
 * is stuck (in the UART code, or anywhere else) still has its motor stopped on time.
 */
#ifndef RIP_FW_H
#define RIP_FW_H

#include <stdbool.h>
#include <stdint.h>

#define RIP_PROTOCOL_VERSION 1u
#define RIP_SYNC1 0xA5u
#define RIP_SYNC2 0x5Au
#define RIP_MAX_PAYLOAD 32u
#define RIP_HEADER_SIZE 5u /* sync (2), len, seq, cmd */
#define RIP_CRC_SIZE 2u
#define RIP_MAX_FRAME (RIP_HEADER_SIZE + RIP_MAX_PAYLOAD + RIP_CRC_SIZE) /* 39 */
#define RIP_REPLY_BIT 0x80u

#define RIP_DEADMAN_MIN_MS 10u
#define RIP_DEADMAN_MAX_MS 2000u
#define RIP_DEADMAN_DEFAULT_MS 100u

enum rip_cmd {
    RIP_CMD_PING = 0x01,
    RIP_CMD_GET_STATE = 0x02,
    RIP_CMD_SET_VOLTAGE = 0x03,
    RIP_CMD_ENGAGE = 0x04,
    RIP_CMD_DISENGAGE = 0x05,
    RIP_CMD_SET_DEADMAN = 0x06,
    RIP_CMD_NACK = 0x7F /* sent by the device only, as 0xFF */
};

enum rip_error {
    RIP_ERR_NONE = 0,
    RIP_ERR_BAD_CRC = 1,
    RIP_ERR_UNKNOWN_COMMAND = 2,
    RIP_ERR_BAD_LENGTH = 3,
    RIP_ERR_NOT_ENGAGED = 4,
    RIP_ERR_OUT_OF_RANGE = 5
};

enum rip_status {
    RIP_STATUS_ENGAGED = 0x01,
    RIP_STATUS_DEADMAN_TRIPPED = 0x02, /* latched until the next ENGAGE */
    RIP_STATUS_ARM_LIMIT = 0x04,
    RIP_STATUS_VOLTAGE_CLAMPED = 0x08
};

typedef struct {
    uint16_t counts_per_rev; /* reported by PING */
    uint16_t max_mv;         /* motor limit: SET_VOLTAGE is clamped to +/- this */
    uint16_t deadman_ms;     /* initial deadman timeout, 10..2000 (0: the default 100) */
    uint16_t fw_build;       /* reported by PING */
} rip_fw_config_t;

typedef struct {
    uint32_t frames;        /* CRC-valid frames handled */
    uint32_t bad_frames;    /* dropped for a bad CRC or an impossible length */
    uint32_t deadman_trips;
    uint32_t ms;            /* timer ticks since init */
} rip_fw_stats_t;

/* Power-on: motor disabled, parser empty, deadman at config->deadman_ms. */
void rip_fw_init(const rip_fw_config_t *config);

/* Main context: one received byte. A completed request is handled and answered at once. */
void rip_fw_rx_byte(uint8_t byte);

/* Timer context, every millisecond: the clock and the deadman. Must not be preempted by the
 * main context (it runs in an interrupt; the host port takes the lock around it). */
void rip_fw_tick_1ms(void);

/* Main context: disable the motor now (power-down, emergency). True if it was engaged. */
bool rip_fw_stop_motor(void);

bool rip_fw_engaged(void);
uint8_t rip_fw_status(void);
int16_t rip_fw_applied_mv(void);
uint16_t rip_fw_deadman_ms(void);
void rip_fw_get_stats(rip_fw_stats_t *out);

/* CRC-16/CCITT-FALSE of data, continuing from crc (start with 0xFFFF). */
uint16_t rip_crc16(uint16_t crc, const uint8_t *data, uint8_t length);

/* Build a frame into out (RIP_MAX_FRAME bytes); returns its length, 0 if payload too long. */
uint8_t rip_encode_frame(uint8_t *out, uint8_t seq, uint8_t cmd, const uint8_t *payload,
                         uint8_t length);

#endif /* RIP_FW_H */
