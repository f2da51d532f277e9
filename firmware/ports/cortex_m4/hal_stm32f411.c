/*
 * hal_stm32f411.c - a second port, ARM Cortex-M4 (STM32F411 "Black Pill" class, 16 MHz HSI),
 * to prove the HAL on another architecture. It builds (make firmware) but has not been run on
 * a board: registers are written directly from the reference manual (RM0383), no vendor
 * headers. Pins: docs/rig_wiring.md.
 *
 * Encoders in hardware quadrature mode: arm on TIM2 (32 bits, PA0/PA1), pendulum on TIM3
 * (16 bits, PB4/PB5, extended to 32 in software). SysTick: the 1 kHz tick. TIM5: the
 * microsecond clock. TIM1 CH1 (PA8): motor PWM at 20 kHz; PB0 direction, PB1 enable, PB10
 * emergency stop sense. USART2 (PA2/PA3): the host link at 1 Mbaud. The independent
 * watchdog (60 ms) is fed by the tick only.
 */
#include <stdint.h>

#include "../../core/rip_fw.h"
#include "../../core/rip_hal.h"

#define REG(addr) (*(volatile uint32_t *)(addr))

#define RCC 0x40023800u
#define RCC_AHB1ENR REG(RCC + 0x30u)
#define RCC_APB1ENR REG(RCC + 0x40u)
#define RCC_APB2ENR REG(RCC + 0x44u)

#define GPIOA 0x40020000u
#define GPIOB 0x40020400u
#define GPIO_MODER(g) REG((g) + 0x00u)
#define GPIO_PUPDR(g) REG((g) + 0x0Cu)
#define GPIO_IDR(g) REG((g) + 0x10u)
#define GPIO_BSRR(g) REG((g) + 0x18u)
#define GPIO_AFRL(g) REG((g) + 0x20u)
#define GPIO_AFRH(g) REG((g) + 0x24u)

#define TIM1 0x40010000u
#define TIM2 0x40000000u
#define TIM3 0x40000400u
#define TIM5 0x40000C00u
#define TIM_CR1(t) REG((t) + 0x00u)
#define TIM_SMCR(t) REG((t) + 0x08u)
#define TIM_EGR(t) REG((t) + 0x14u)
#define TIM_CCMR1(t) REG((t) + 0x18u)
#define TIM_CCER(t) REG((t) + 0x20u)
#define TIM_CNT(t) REG((t) + 0x24u)
#define TIM_PSC(t) REG((t) + 0x28u)
#define TIM_ARR(t) REG((t) + 0x2Cu)
#define TIM_CCR1(t) REG((t) + 0x34u)
#define TIM_BDTR(t) REG((t) + 0x44u)

#define USART2 0x40004400u
#define USART_SR REG(USART2 + 0x00u)
#define USART_DR REG(USART2 + 0x04u)
#define USART_BRR REG(USART2 + 0x08u)
#define USART_CR1 REG(USART2 + 0x0Cu)
#define USART2_IRQ 38u

#define SYST_CSR REG(0xE000E010u)
#define SYST_RVR REG(0xE000E014u)
#define SYST_CVR REG(0xE000E018u)
#define NVIC_ISER(n) REG(0xE000E100u + 4u * (n))

#define IWDG_KR REG(0x40003000u)
#define IWDG_PR REG(0x40003004u)
#define IWDG_RLR REG(0x40003008u)

#define CPU_HZ 16000000u
#define PWM_TOP 799u /* 16 MHz / 800 = 20 kHz */
#define COUNTS_PER_REV 2048u
#define MAX_MV 10000u
#define SUPPLY_MV 12000u
#define ARM_LIMIT_COUNTS 652L
#define FW_BUILD 4u

/* ---- the lock: PRIMASK ------------------------------------------------------------------ */

rip_irq_state_t rip_hal_irq_lock(void)
{
    uint32_t primask;
    __asm__ volatile("mrs %0, primask\n cpsid i" : "=r"(primask)::"memory");
    return primask;
}

void rip_hal_irq_unlock(rip_irq_state_t state)
{
    __asm__ volatile("msr primask, %0" ::"r"(state) : "memory");
}

/* ---- encoders --------------------------------------------------------------------------- */

static volatile int32_t g_pend;
static volatile uint16_t g_pend_last;

/* Fold TIM3's 16-bit count into the 32-bit position. Interrupts off. At most 32767 counts
 * between calls (every millisecond): 16 revolutions per millisecond. */
static void pend_update_locked(void)
{
    uint16_t now = (uint16_t)TIM_CNT(TIM3);
    g_pend += (int16_t)(uint16_t)(now - g_pend_last);
    g_pend_last = now;
}

void rip_hal_encoders_sample(int32_t *arm, int32_t *pendulum, uint32_t *t_us)
{
    rip_irq_state_t irq = rip_hal_irq_lock();
    *arm = (int32_t)TIM_CNT(TIM2);
    pend_update_locked();
    *pendulum = g_pend;
    *t_us = TIM_CNT(TIM5);
    rip_hal_irq_unlock(irq);
}

bool rip_hal_arm_at_limit(void)
{
    int32_t arm = (int32_t)TIM_CNT(TIM2);
    return arm >= ARM_LIMIT_COUNTS || arm <= -ARM_LIMIT_COUNTS;
}

/* ---- motor ------------------------------------------------------------------------------ */

void rip_hal_motor_enable(bool on)
{
    GPIO_BSRR(GPIOB) = on ? (1u << 1) : (1u << (1 + 16));
}

bool rip_hal_motor_allowed(void)
{
    return !(GPIO_IDR(GPIOB) & (1u << 10)); /* PB10 high: stop pressed, or its wire broken */
}

void rip_hal_motor_set_mv(int16_t millivolts)
{
    uint32_t magnitude = millivolts < 0 ? (uint32_t)(-(int32_t)millivolts) : (uint32_t)millivolts;
    uint32_t duty = magnitude * (PWM_TOP + 1u) / SUPPLY_MV;
    GPIO_BSRR(GPIOB) = millivolts < 0 ? (1u << 0) : (1u << 16);
    TIM_CCR1(TIM1) = duty > PWM_TOP ? PWM_TOP : duty;
}

/* ---- USART2 ----------------------------------------------------------------------------- */

#define RX_RING 64u
static volatile uint8_t g_rx_ring[RX_RING];
static volatile uint32_t g_rx_head;
static volatile uint32_t g_rx_tail;

void USART2_IRQHandler(void);
void USART2_IRQHandler(void)
{
    /* Reading SR then DR clears RXNE and the error flags (overrun, noise, framing): an
     * overrun left set would keep this interrupt pending for good. */
    uint32_t sr = USART_SR;
    uint8_t byte = (uint8_t)USART_DR;
    if (sr & (1u << 5)) { /* RXNE: a byte came */
        uint32_t next = (g_rx_head + 1u) & (RX_RING - 1u);
        if (next != g_rx_tail) {
            g_rx_ring[g_rx_head] = byte;
            g_rx_head = next;
        }
    }
}

void rip_hal_uart_write(const uint8_t *data, uint8_t length)
{
    uint8_t i;
    for (i = 0; i < length; i++) {
        while (!(USART_SR & (1u << 7))) { /* TXE */
        }
        USART_DR = data[i];
    }
}

void rip_hal_event(rip_event_t event)
{
    (void)event;
}

/* ---- the 1 kHz tick --------------------------------------------------------------------- */

void SysTick_Handler(void);
void SysTick_Handler(void)
{
    IWDG_KR = 0xAAAAu; /* feed the watchdog: only a running tick does */
    pend_update_locked();
    rip_fw_tick_1ms();
}

/* ---- start-up --------------------------------------------------------------------------- */

static void board_init(void)
{
    RCC_AHB1ENR |= (1u << 0) | (1u << 1);                         /* GPIOA, GPIOB */
    RCC_APB1ENR |= (1u << 0) | (1u << 1) | (1u << 3) | (1u << 17); /* TIM2 TIM3 TIM5 USART2 */
    RCC_APB2ENR |= (1u << 0);                                     /* TIM1 */

    /* Motor pins first: PB0 direction, PB1 enable, low, outputs (an external pull-down holds
     * enable low through reset); PB10 stop sense, pull-up. */
    GPIO_BSRR(GPIOB) = (1u << 16) | (1u << 17);
    GPIO_MODER(GPIOB) = (GPIO_MODER(GPIOB) & ~0xFu) | 0x5u;
    GPIO_PUPDR(GPIOB) = (GPIO_PUPDR(GPIOB) & ~(3u << 20)) | (1u << 20);

    /* PA0/PA1 TIM2 (AF1), PA2/PA3 USART2 (AF7), PA8 TIM1_CH1 (AF1); PB4/PB5 TIM3 (AF2). */
    GPIO_MODER(GPIOA) = (GPIO_MODER(GPIOA) & ~0x300FFu) | 0x200AAu;
    GPIO_AFRL(GPIOA) = (GPIO_AFRL(GPIOA) & ~0xFFFFu) | 0x7711u;
    GPIO_AFRH(GPIOA) = (GPIO_AFRH(GPIOA) & ~0xFu) | 0x1u;
    GPIO_PUPDR(GPIOA) = (GPIO_PUPDR(GPIOA) & ~0xFu) | 0x5u;
    GPIO_MODER(GPIOB) = (GPIO_MODER(GPIOB) & ~0xF00u) | 0xA00u;
    GPIO_AFRL(GPIOB) = (GPIO_AFRL(GPIOB) & ~0xFF0000u) | 0x220000u;
    GPIO_PUPDR(GPIOB) = (GPIO_PUPDR(GPIOB) & ~0xF00u) | 0x500u;

    /* Encoders: encoder mode 3 (both edges of both channels), input filter 3 (8 samples at
     * f_CK_INT). */
    TIM_CCMR1(TIM2) = (1u << 0) | (1u << 8) | (3u << 4) | (3u << 12);
    TIM_SMCR(TIM2) = 3u;
    TIM_ARR(TIM2) = 0xFFFFFFFFu;
    TIM_CNT(TIM2) = 0;
    TIM_CR1(TIM2) = 1u;
    TIM_CCMR1(TIM3) = (1u << 0) | (1u << 8) | (3u << 4) | (3u << 12);
    TIM_SMCR(TIM3) = 3u;
    TIM_ARR(TIM3) = 0xFFFFu;
    TIM_CNT(TIM3) = 0;
    TIM_CR1(TIM3) = 1u;

    /* Microsecond clock: TIM5, 32 bits at 1 MHz. */
    TIM_PSC(TIM5) = CPU_HZ / 1000000u - 1u;
    TIM_ARR(TIM5) = 0xFFFFFFFFu;
    TIM_EGR(TIM5) = 1u; /* load the prescaler */
    TIM_CR1(TIM5) = 1u;

    /* PWM: TIM1 CH1, mode 1 with preload, 20 kHz, main output enabled. */
    TIM_ARR(TIM1) = PWM_TOP;
    TIM_CCR1(TIM1) = 0;
    TIM_CCMR1(TIM1) = (6u << 4) | (1u << 3);
    TIM_CCER(TIM1) = 1u;
    TIM_BDTR(TIM1) = 1u << 15;
    TIM_EGR(TIM1) = 1u;
    TIM_CR1(TIM1) = (1u << 7) | 1u;

    /* USART2: 1 Mbaud at 16 MHz, oversampling by 16: USARTDIV = 1.0. */
    USART_BRR = 0x10u;
    USART_CR1 = (1u << 13) | (1u << 5) | (1u << 3) | (1u << 2); /* UE RXNEIE TE RE */
    NVIC_ISER(USART2_IRQ / 32u) = 1u << (USART2_IRQ % 32u);

    /* 1 kHz SysTick from the core clock. */
    SYST_RVR = CPU_HZ / 1000u - 1u;
    SYST_CVR = 0;
    SYST_CSR = 7u; /* processor clock, interrupt, enable */
}

int main(void);
int main(void)
{
    static const rip_fw_config_t config = {COUNTS_PER_REV, MAX_MV, RIP_DEADMAN_DEFAULT_MS,
                                           FW_BUILD};
    rip_irq_state_t irq = rip_hal_irq_lock();
    board_init();
    rip_fw_init(&config);
    /* Independent watchdog: LSI 32 kHz / 4 = 8 kHz, 480 counts = 60 ms. */
    IWDG_KR = 0x5555u;
    IWDG_PR = 0u;
    IWDG_RLR = 480u;
    IWDG_KR = 0xCCCCu;
    (void)irq;
    __asm__ volatile("cpsie i" ::: "memory"); /* interrupts on */
    for (;;) {
        while (g_rx_tail != g_rx_head) {
            uint8_t byte = g_rx_ring[g_rx_tail];
            g_rx_tail = (g_rx_tail + 1u) & (RX_RING - 1u);
            rip_fw_rx_byte(byte);
        }
    }
}

/* ---- reset and vectors ------------------------------------------------------------------ */

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;

void Reset_Handler(void);
void Reset_Handler(void)
{
    uint32_t *src = &_sidata;
    uint32_t *dst;
    for (dst = &_sdata; dst < &_edata;) {
        *dst++ = *src++;
    }
    for (dst = &_sbss; dst < &_ebss;) {
        *dst++ = 0;
    }
    (void)main();
    for (;;) {
    }
}

void Default_Handler(void);
void Default_Handler(void)
{
    /* An unexpected fault or interrupt: motor off, then wait for the watchdog's reset. */
    GPIO_BSRR(GPIOB) = 1u << 17;
    for (;;) {
    }
}

/* Entries left 0 (an interrupt this port never enables) would fault into Default_Handler. */
#define N_VECTORS (16u + 86u)

__attribute__((section(".isr_vector"), used)) static const uintptr_t k_vectors[N_VECTORS] = {
    [0] = (uintptr_t)&_estack,
    [1] = (uintptr_t)Reset_Handler,
    [2] = (uintptr_t)Default_Handler,  /* NMI */
    [3] = (uintptr_t)Default_Handler,  /* HardFault */
    [4] = (uintptr_t)Default_Handler,  /* MemManage */
    [5] = (uintptr_t)Default_Handler,  /* BusFault */
    [6] = (uintptr_t)Default_Handler,  /* UsageFault */
    [15] = (uintptr_t)SysTick_Handler,
    [16u + USART2_IRQ] = (uintptr_t)USART2_IRQHandler,
};
