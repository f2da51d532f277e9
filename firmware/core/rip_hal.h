/*
 * rip_hal.h - what a port provides to the portable firmware core.
 *
 * A port is one C file that implements these functions for its board, and a main() that
 * calls rip_fw_init(), feeds received bytes to rip_fw_rx_byte() from its main loop and calls
 * rip_fw_tick_1ms() from a 1 kHz timer interrupt. Nothing else in the core touches hardware.
 *
 * Contexts: "main" is the main loop (serial handling); "timer" is the 1 kHz timer interrupt
 * (or, on the host, a timer thread). The core calls every function below from main, except
 * rip_hal_motor_enable(false), rip_hal_motor_set_mv(0) and rip_hal_event(), which the deadman
 * also calls from timer. They must therefore be safe to call from an interrupt.
 */
#ifndef RIP_HAL_H
#define RIP_HAL_H

#include <stdbool.h>
#include <stdint.h>

/* Critical section: the timer context cannot run between lock and unlock. Returns the state
 * to restore (nesting is not needed by the core, but a port may support it). */
typedef uint32_t rip_irq_state_t;
rip_irq_state_t rip_hal_irq_lock(void);
void rip_hal_irq_unlock(rip_irq_state_t state);

/* Encoders: signed, continuous counts (no wrapping) since power-on, and the microsecond
 * clock at the moment they were latched. Both counts must be taken together. */
void rip_hal_encoders_sample(int32_t *arm, int32_t *pendulum, uint32_t *t_us);

/* The arm is at its cable hard stop (a limit switch, or a count limit). */
bool rip_hal_arm_at_limit(void);

/* Motor driver. enable(false) must cut the drive at once (driver enable pin low: the motor
 * coasts open-circuit). set_mv receives a value already clamped to the motor limit; a port
 * turns it into PWM duty and direction. */
void rip_hal_motor_enable(bool on);
void rip_hal_motor_set_mv(int16_t millivolts);

/* False while the emergency stop's sense input says pressed (or its wire is broken): the
 * core then refuses ENGAGE and the timer disengages within a millisecond. A port without
 * such an input returns true. Called from main and from timer. */
bool rip_hal_motor_allowed(void);

/* Send one whole reply frame (at most RIP_MAX_FRAME bytes). May block until queued. */
void rip_hal_uart_write(const uint8_t *data, uint8_t length);

/* Something a port may report (a LED, a log line); a no-op is fine. Called from main and
 * from timer. */
typedef enum {
    RIP_EVENT_ENGAGED = 1,      /* by ENGAGE */
    RIP_EVENT_DISENGAGED = 2,   /* by DISENGAGE */
    RIP_EVENT_DEADMAN = 3,      /* the deadman disengaged the motor */
    RIP_EVENT_STOP_INPUT = 4,   /* the emergency stop's input disengaged the motor */
} rip_event_t;
void rip_hal_event(rip_event_t event);

#endif /* RIP_HAL_H */
