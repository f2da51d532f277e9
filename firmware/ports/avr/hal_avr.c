/*
 * hal_avr.c - the ATmega2560 port: rip_hal.h on bare metal with avr-libc, and main().
 *
 * Encoders: arm A/B on INT4/INT5 (PE4/PE5, D2/D3), pendulum A/B on INT2/INT3 (PD2/PD3,
 * D19/D18); any edge of either channel decodes one quarter step (4x). Timer0: the 1 kHz
 * tick (deadman). Timer1: the microsecond clock (2 MHz, 16 bits, overflow-extended).
 * Timer4: motor PWM. UART0: the host link, received by interrupt into a ring buffer and
 * handed to the core from the main loop. The hardware watchdog (60 ms) is fed by the timer
 * tick only, so a firmware whose interrupts are stuck off resets, and a reset leaves every
 * pin an input and the driver's enable line pulled low: motor off.
 */
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/wdt.h>
#include <stdint.h>
#include <util/atomic.h>

#include "../../core/rip_fw.h"
#include "../../core/rip_hal.h"
#include "board.h"

/* ---- interrupts: the lock --------------------------------------------------------------- */

rip_irq_state_t rip_hal_irq_lock(void)
{
    rip_irq_state_t sreg = SREG;
    cli();
    return sreg;
}

void rip_hal_irq_unlock(rip_irq_state_t state)
{
    __asm__ volatile("" ::: "memory"); /* no access moves out of the critical section */
    SREG = (uint8_t)state;
}

/* ---- microsecond clock (Timer1) --------------------------------------------------------- */

static volatile uint32_t g_t1_overflows; /* each one is 65536 ticks = 32768 us */

ISR(TIMER1_OVF_vect)
{
    g_t1_overflows++;
}

/* Interrupts off. Wraps as a u32 of microseconds, as the protocol's t_us does. */
static uint32_t micros_locked(void)
{
    uint16_t low = TCNT1;
    uint32_t overflows = g_t1_overflows;
    if ((TIFR1 & _BV(TOV1)) && low < 0x8000u) {
        overflows++; /* overflowed after cli, not yet counted */
    }
    return (overflows << 15) + (uint32_t)(low >> 1); /* 2 ticks per microsecond */
}

/* ---- encoders --------------------------------------------------------------------------- */

static volatile int32_t g_arm;
static volatile int32_t g_pend;
static uint8_t g_arm_ab;
static uint8_t g_pend_ab;

/* Quadrature step from the previous (A,B) to the new one: +1, -1, or 0 (no move, or a
 * missed state, which is not guessed at). Index: previous << 2 | current. */
static const int8_t k_quad[16] = {0, -1, 1, 0, 1, 0, 0, -1, -1, 0, 0, 1, 0, 1, -1, 0};

static void arm_edge(void)
{
    uint8_t pins = PINE; /* both channels from one read */
    uint8_t ab = (uint8_t)(((pins >> PE4) & 1u) << 1 | ((pins >> PE5) & 1u));
    g_arm += k_quad[(g_arm_ab << 2) | ab];
    g_arm_ab = ab;
}

static void pend_edge(void)
{
    uint8_t pins = PIND;
    uint8_t ab = (uint8_t)(((pins >> PD2) & 1u) << 1 | ((pins >> PD3) & 1u));
    g_pend += k_quad[(g_pend_ab << 2) | ab];
    g_pend_ab = ab;
}

ISR(INT4_vect) { arm_edge(); }
ISR(INT5_vect, ISR_ALIASOF(INT4_vect));
ISR(INT2_vect) { pend_edge(); }
ISR(INT3_vect, ISR_ALIASOF(INT2_vect));

void rip_hal_encoders_sample(int32_t *arm, int32_t *pendulum, uint32_t *t_us)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        *arm = g_arm;
        *pendulum = g_pend;
        *t_us = micros_locked();
    }
}

bool rip_hal_arm_at_limit(void)
{
    int32_t arm;
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE) { arm = g_arm; }
    return arm >= BOARD_ARM_LIMIT_COUNTS || arm <= -BOARD_ARM_LIMIT_COUNTS;
}

/* ---- motor driver (Timer4 PWM, direction, enable) --------------------------------------- */

/* PORTH lies beyond SBI/CBI's reach: every change of it is a read-modify-write, made with
 * interrupts off. */
void rip_hal_motor_enable(bool on)
{
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        if (on) {
            PORTH |= _BV(BOARD_EN_BIT);
        } else {
            PORTH &= (uint8_t)~_BV(BOARD_EN_BIT);
        }
    }
}

bool rip_hal_motor_allowed(void)
{
    return !(PINH & _BV(BOARD_ESTOP_BIT)); /* high: pressed, or its wire broken */
}

/* Millivolts per PWM step: full duty (TOP + 1 steps) is the supply voltage. A 16-bit
 * division, short enough to run with interrupts off. */
#define MV_PER_STEP (BOARD_SUPPLY_MV / (BOARD_PWM_TOP + 1u))
typedef char assert_mv_per_step_exact[(MV_PER_STEP * (BOARD_PWM_TOP + 1u) == BOARD_SUPPLY_MV) ? 1 : -1];

void rip_hal_motor_set_mv(int16_t millivolts)
{
    uint16_t magnitude = millivolts < 0 ? (uint16_t)(-(int32_t)millivolts) : (uint16_t)millivolts;
    uint16_t duty = (uint16_t)(magnitude / MV_PER_STEP);
    if (duty > BOARD_PWM_TOP) {
        duty = BOARD_PWM_TOP;
    }
    ATOMIC_BLOCK(ATOMIC_RESTORESTATE)
    {
        if (millivolts < 0) {
            PORTH |= _BV(BOARD_DIR_BIT);
        } else {
            PORTH &= (uint8_t)~_BV(BOARD_DIR_BIT);
        }
        OCR4A = duty; /* 16-bit register: written with interrupts off */
        if (duty == 0) {
            TCCR4A &= (uint8_t)~_BV(COM4A1); /* fast PWM at 0 still pulses once a period */
        } else {
            TCCR4A |= _BV(COM4A1);
        }
    }
}

/* ---- UART0 ------------------------------------------------------------------------------ */

#define RX_RING 64u /* a power of two; 640 us of bytes at 1 Mbaud */
static volatile uint8_t g_rx_ring[RX_RING];
static volatile uint8_t g_rx_head; /* written by the ISR */
static volatile uint8_t g_rx_tail; /* written by the main loop */

ISR(USART0_RX_vect)
{
    uint8_t byte = UDR0;
    uint8_t next = (uint8_t)((g_rx_head + 1u) & (RX_RING - 1u));
    if (next != g_rx_tail) {
        g_rx_ring[g_rx_head] = byte;
        g_rx_head = next;
    } /* else dropped: the host's CRC and timeout handle a lost byte */
}

void rip_hal_uart_write(const uint8_t *data, uint8_t length)
{
    uint8_t i;
    for (i = 0; i < length; i++) {
        while (!(UCSR0A & _BV(UDRE0))) {
        }
        UDR0 = data[i];
    }
}

void rip_hal_event(rip_event_t event)
{
    /* The Mega's LED (PB7, D13) shows engaged. PORTB is in SBI/CBI's reach: atomic. */
    if (event == RIP_EVENT_ENGAGED) {
        PORTB |= _BV(PB7);
    } else {
        PORTB &= (uint8_t)~_BV(PB7);
    }
}

/* ---- the 1 kHz tick (Timer0) ------------------------------------------------------------ */

ISR(TIMER0_COMPA_vect)
{
    wdt_reset();
    rip_fw_tick_1ms();
}

/* ---- start-up --------------------------------------------------------------------------- */

static void board_init(void)
{
    /* Motor first: enable low, PWM 0, direction low, all outputs. */
    PORTH &= (uint8_t)~(_BV(BOARD_EN_BIT) | _BV(BOARD_DIR_BIT) | _BV(PH3));
    DDRH |= _BV(BOARD_EN_BIT) | _BV(BOARD_DIR_BIT) | _BV(PH3);
    PORTH |= _BV(BOARD_ESTOP_BIT); /* pull-up on the emergency stop sense */
    DDRB |= _BV(PB7);

    /* Timer4: fast PWM with ICR4 as TOP (mode 14, set before ICR4 is written), no
     * prescaler: 20 kHz. OC4A stays disconnected (pin low) until a duty is set. */
    TCCR4A = _BV(WGM41);
    TCCR4B = _BV(WGM43) | _BV(WGM42);
    ICR4 = BOARD_PWM_TOP;
    OCR4A = 0;
    TCCR4B |= _BV(CS40);

    /* Timer1: free running at F_CPU / 8 = 2 MHz, overflow interrupt extends it. */
    TCCR1A = 0;
    TCCR1B = _BV(CS11);
    TIMSK1 = _BV(TOIE1);

    /* Timer0: CTC at F_CPU / 64 / 250 = 1 kHz. */
    TCCR0A = _BV(WGM01);
    OCR0A = 249;
    TCCR0B = _BV(CS01) | _BV(CS00);
    TIMSK0 = _BV(OCIE0A);

    /* Encoders: inputs with pull-ups, any-edge external interrupts. */
    DDRE &= (uint8_t)~(_BV(PE4) | _BV(PE5));
    PORTE |= _BV(PE4) | _BV(PE5);
    DDRD &= (uint8_t)~(_BV(PD2) | _BV(PD3));
    PORTD |= _BV(PD2) | _BV(PD3);
    EICRA = _BV(ISC20) | _BV(ISC30);
    EICRB = _BV(ISC40) | _BV(ISC50);
    g_arm_ab = (uint8_t)(((PINE >> PE4) & 1u) << 1 | ((PINE >> PE5) & 1u));
    g_pend_ab = (uint8_t)(((PIND >> PD2) & 1u) << 1 | ((PIND >> PD3) & 1u));
    EIFR = _BV(INTF2) | _BV(INTF3) | _BV(INTF4) | _BV(INTF5); /* edges seen while setting up */
    EIMSK = _BV(INT2) | _BV(INT3) | _BV(INT4) | _BV(INT5);

    /* UART0: 1 Mbaud 8N1, receive interrupt. */
    UBRR0 = BOARD_UBRR;
    UCSR0A = _BV(U2X0);
    UCSR0C = _BV(UCSZ01) | _BV(UCSZ00);
    UCSR0B = _BV(RXEN0) | _BV(TXEN0) | _BV(RXCIE0);
}

int main(void)
{
    static const rip_fw_config_t config = {BOARD_COUNTS_PER_REV, BOARD_MAX_MV,
                                           RIP_DEADMAN_DEFAULT_MS, BOARD_FW_BUILD};
    MCUSR = 0; /* a watchdog reset is over: the motor is off, start clean */
    wdt_disable();
    board_init();
    rip_fw_init(&config);
    wdt_enable(WDTO_60MS);
    sei();
    for (;;) {
        /* The emergency stop's sense is read by the core: ENGAGE is refused while pressed,
         * and the timer disengages within a millisecond of a press (rip_hal_motor_allowed). */
        while (g_rx_tail != g_rx_head) {
            uint8_t byte = g_rx_ring[g_rx_tail];
            g_rx_tail = (uint8_t)((g_rx_tail + 1u) & (RX_RING - 1u));
            rip_fw_rx_byte(byte);
        }
    }
}
