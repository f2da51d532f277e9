/*
 * plant.h - the rotary inverted pendulum simulated in C for the host firmware: the same
 * equations, integrator and parameters as rip_control/rig/dynamics.py (FurutaDynamics).
 * This is the "hardware" the host port's HAL reads and drives; it may use floating point.
 */
#ifndef RIP_PLANT_H
#define RIP_PLANT_H

#include <stdbool.h>

typedef struct {
    double motor_resistance_ohm;
    double motor_torque_constant_nm_per_a;
    double motor_back_emf_v_s_per_rad;
    double rotor_and_hub_inertia_kg_m2;
    double max_voltage_v;
    double motor_dead_zone_v;
    double motor_dead_zone_offset_v;
    double actuator_lag_s;
    double arm_mass_kg;
    double arm_length_m;
    double arm_viscous_damping_nms_per_rad;
    double arm_coulomb_friction_nm;
    double arm_static_friction_nm;
    double arm_cable_stiffness_nm_per_rad;
    double arm_limit_rad;
    double pendulum_mass_kg;
    double pendulum_length_m;
    double pendulum_viscous_damping_nms_per_rad;
    double pendulum_inertia_factor;
    double gravity_m_s2;
    double encoder_counts_per_rev;
    double encoder_noise_counts;
    double sensing_latency_s;
    double physics_rate_hz;
} plant_params_t;

typedef struct {
    plant_params_t p;
    /* derived constants */
    double jp, j0, mrl, mgl, kt_over_r, km, br, bp, fc, fs, kc;
    /* state */
    double theta, alpha, theta_dot, alpha_dot;
    double motor_volts; /* what the motor sees: the driver's output after the lag */
    bool at_limit;
} plant_t;

/* The QUBE-Servo 2 defaults of PendulumParams. */
void plant_default_params(plant_params_t *p);

/* Set a parameter by its PendulumParams name; false if the name is unknown. */
bool plant_set_param(plant_params_t *p, const char *name, double value);

void plant_init(plant_t *plant, const plant_params_t *params);
void plant_set_state(plant_t *plant, double theta, double alpha, double theta_dot,
                     double alpha_dot);

/* One RK4 step of dt_s with the voltage held, then the arm's hard stop. */
void plant_step(plant_t *plant, double dt_s, double voltage_v, bool engaged);

/* Quantised encoder counts (pendulum zero hanging down). */
void plant_encoder_counts(const plant_t *plant, long *arm, long *pendulum);

#endif /* RIP_PLANT_H */
