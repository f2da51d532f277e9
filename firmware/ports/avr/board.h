/*
 * board.h - the do-it-yourself rig on an ATmega2560 (Arduino Mega 2560 class) at 16 MHz.
 * Pin map and wiring: docs/rig_wiring.md. Change the values here for another rig.
 */
#ifndef RIP_BOARD_H
#define RIP_BOARD_H

/* What PING reports, and the limits the core enforces. */
#define BOARD_COUNTS_PER_REV 2048u /* 512-line encoders, 4x decoding (both edges, A and B) */
#define BOARD_MAX_MV 10000u        /* motor voltage limit: SET_VOLTAGE is clamped to it */
#define BOARD_SUPPLY_MV 12000u     /* H-bridge supply: full PWM duty applies this */
#define BOARD_FW_BUILD 3u          /* 1: Python emulator, 2: host build, 3: this port */

/* The arm's cable hard stop, in arm encoder counts either side of the power-on position
 * (2.0 rad at 2048 counts per revolution); ARM_LIMIT is reported beyond it. */
#define BOARD_ARM_LIMIT_COUNTS 652L

/* UART0 (the USB serial of the Mega's 16U2, pins D0/D1): 1 000 000 baud, double speed. */
#define BOARD_UBRR 1u /* F_CPU / (8 * baud) - 1, exact at 16 MHz */

/* H-bridge: PWM on OC4A (PH3, D6) at 20 kHz, direction on PH4 (D7), enable on PH5 (D8). The
 * enable line needs an external 10 k pull-down so the driver stays off while the MCU is in
 * reset or being flashed. */
#define BOARD_PWM_TOP 799u /* 16 MHz / (1 * 800) = 20 kHz, fast PWM with ICR4 as TOP */
#define BOARD_DIR_BIT PH4
#define BOARD_EN_BIT PH5

/* Emergency stop sense (PH6, D9, to ground through the stop's auxiliary NC contact, with the
 * internal pull-up): high means pressed or wire broken, and the firmware keeps the motor
 * off. The stop's main contact cuts the H-bridge supply in hardware whatever the MCU does. */
#define BOARD_ESTOP_BIT PH6

#endif /* RIP_BOARD_H */
