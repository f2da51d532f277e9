/*
 * plant.c - see plant.h. Each expression mirrors FurutaDynamics in
 * rip_control/rig/dynamics.py, in the same order, so both integrate the same trajectory
 * (test/test_host_firmware.py compares them).
 */
#include "plant.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#define TWO_PI (2.0 * 3.14159265358979323846)

void plant_default_params(plant_params_t *p)
{
    p->motor_resistance_ohm = 8.4;
    p->motor_torque_constant_nm_per_a = 0.042;
    p->motor_back_emf_v_s_per_rad = 0.042;
    p->rotor_and_hub_inertia_kg_m2 = 4.6e-6;
    p->max_voltage_v = 10.0;
    p->motor_dead_zone_v = 0.0;
    p->motor_dead_zone_offset_v = 0.0;
    p->actuator_lag_s = 0.0;
    p->arm_mass_kg = 0.095;
    p->arm_length_m = 0.085;
    p->arm_viscous_damping_nms_per_rad = 5.0e-4;
    p->arm_coulomb_friction_nm = 0.0;
    p->arm_static_friction_nm = 0.0;
    p->arm_cable_stiffness_nm_per_rad = 0.0;
    p->arm_limit_rad = 2.0;
    p->pendulum_mass_kg = 0.024;
    p->pendulum_length_m = 0.129;
    p->pendulum_viscous_damping_nms_per_rad = 3.0e-5;
    p->pendulum_inertia_factor = 1.0;
    p->gravity_m_s2 = 9.81;
    p->encoder_counts_per_rev = 2048;
    p->encoder_noise_counts = 0.0;
    p->sensing_latency_s = 0.0;
    p->physics_rate_hz = 2000.0;
}

#define PARAM(name) {#name, offsetof(plant_params_t, name)}
static const struct {
    const char *name;
    size_t offset;
} k_params[] = {
    PARAM(motor_resistance_ohm),
    PARAM(motor_torque_constant_nm_per_a),
    PARAM(motor_back_emf_v_s_per_rad),
    PARAM(rotor_and_hub_inertia_kg_m2),
    PARAM(max_voltage_v),
    PARAM(motor_dead_zone_v),
    PARAM(motor_dead_zone_offset_v),
    PARAM(actuator_lag_s),
    PARAM(arm_mass_kg),
    PARAM(arm_length_m),
    PARAM(arm_viscous_damping_nms_per_rad),
    PARAM(arm_coulomb_friction_nm),
    PARAM(arm_static_friction_nm),
    PARAM(arm_cable_stiffness_nm_per_rad),
    PARAM(arm_limit_rad),
    PARAM(pendulum_mass_kg),
    PARAM(pendulum_length_m),
    PARAM(pendulum_viscous_damping_nms_per_rad),
    PARAM(pendulum_inertia_factor),
    PARAM(gravity_m_s2),
    PARAM(encoder_counts_per_rev),
    PARAM(encoder_noise_counts),
    PARAM(sensing_latency_s),
    PARAM(physics_rate_hz),
};

bool plant_set_param(plant_params_t *p, const char *name, double value)
{
    size_t i;
    for (i = 0; i < sizeof k_params / sizeof k_params[0]; i++) {
        if (strcmp(k_params[i].name, name) == 0) {
            *(double *)((char *)p + k_params[i].offset) = value;
            return true;
        }
    }
    return false;
}

void plant_init(plant_t *s, const plant_params_t *params)
{
    const plant_params_t *p = params;
    double l = p->pendulum_length_m / 2.0;
    double jr;
    memset(s, 0, sizeof *s);
    s->p = *params;
    s->jp = p->pendulum_inertia_factor * p->pendulum_mass_kg * p->pendulum_length_m *
                p->pendulum_length_m / 12.0 +
            p->pendulum_mass_kg * l * l;
    jr = p->arm_mass_kg * p->arm_length_m * p->arm_length_m / 12.0 +
         p->rotor_and_hub_inertia_kg_m2;
    s->mrl = p->pendulum_mass_kg * p->arm_length_m * l;
    s->mgl = p->pendulum_mass_kg * p->gravity_m_s2 * l;
    s->j0 = jr + p->pendulum_mass_kg * p->arm_length_m * p->arm_length_m;
    s->kt_over_r = p->motor_torque_constant_nm_per_a / p->motor_resistance_ohm;
    s->km = p->motor_back_emf_v_s_per_rad;
    s->br = p->arm_viscous_damping_nms_per_rad;
    s->bp = p->pendulum_viscous_damping_nms_per_rad;
    s->fc = p->arm_coulomb_friction_nm;
    s->fs = p->arm_static_friction_nm;
    s->kc = p->arm_cable_stiffness_nm_per_rad;
}

void plant_set_state(plant_t *s, double theta, double alpha, double theta_dot, double alpha_dot)
{
    s->theta = theta;
    s->alpha = alpha;
    s->theta_dot = theta_dot;
    s->alpha_dot = alpha_dot;
    s->at_limit = fabs(theta) >= s->p.arm_limit_rad;
    s->motor_volts = 0.0;
}

static double effective_voltage(const plant_t *s, double v)
{
    double vmax = s->p.max_voltage_v;
    v = v > vmax ? vmax : (v < -vmax ? -vmax : v);
    return fabs(v - s->p.motor_dead_zone_offset_v) < s->p.motor_dead_zone_v ? 0.0 : v;
}

static void accel(const plant_t *s, double theta, double alpha, double td, double ad, double v,
                  bool engaged, double *out_t, double *out_a)
{
    double sa = sin(alpha), ca = cos(alpha);
    double torque = -s->br * td;
    double friction = s->fc;
    double jps, rhs1, rhs2, m11, m12, m22, det;
    if (engaged) {
        torque += s->kt_over_r * (v - s->km * td);
    }
    if (s->fs != 0.0) {
        /* the Stribeck velocity: STRIBECK_VELOCITY_RAD_S in dynamics.py */
        friction += s->fs * exp(-((td / 0.1) * (td / 0.1)));
    }
    if (friction != 0.0) {
        torque -= friction * tanh(td / 0.01);
    }
    if (s->kc != 0.0) {
        torque -= s->kc * theta;
    }
    jps = s->jp * sa;
    rhs1 = torque - 2.0 * jps * ca * td * ad + s->mrl * sa * (ad * ad);
    rhs2 = -s->bp * ad + jps * ca * (td * td) - s->mgl * sa;
    m11 = s->j0 + jps * sa;
    m12 = s->mrl * ca;
    m22 = s->jp;
    det = m11 * m22 - m12 * m12;
    *out_t = (m22 * rhs1 - m12 * rhs2) / det;
    *out_a = (m11 * rhs2 - m12 * rhs1) / det;
}

static void apply_hard_stop(plant_t *s)
{
    double limit = s->p.arm_limit_rad;
    double side, m21;
    if (fabs(s->theta) < limit) {
        s->at_limit = false;
        return;
    }
    s->at_limit = true;
    side = copysign(1.0, s->theta);
    s->theta = side * limit;
    if (s->theta_dot * side > 0.0) {
        /* inelastic stop of the arm; the pendulum keeps its generalised momentum */
        m21 = s->mrl * cos(s->alpha);
        s->alpha_dot = (m21 * s->theta_dot + s->jp * s->alpha_dot) / s->jp;
        s->theta_dot = 0.0;
    }
}

void plant_step(plant_t *s, double dt, double voltage_v, bool engaged)
{
    double v = engaged ? effective_voltage(s, voltage_v) : 0.0;
    double th = s->theta, al = s->alpha, td = s->theta_dot, ad = s->alpha_dot;
    double k1t, k1a, k2t, k2a, k3t, k3a, k4t, k4a;
    double h2 = 0.5 * dt, td2, ad2, td3, ad3, td4, ad4, h6;
    if (s->p.actuator_lag_s > 0.0 && engaged) {
        v = s->motor_volts - expm1(-dt / s->p.actuator_lag_s) * (v - s->motor_volts);
    }
    s->motor_volts = v;
    accel(s, th, al, td, ad, v, engaged, &k1t, &k1a);
    td2 = td + h2 * k1t;
    ad2 = ad + h2 * k1a;
    accel(s, th + h2 * td, al + h2 * ad, td2, ad2, v, engaged, &k2t, &k2a);
    td3 = td + h2 * k2t;
    ad3 = ad + h2 * k2a;
    accel(s, th + h2 * td2, al + h2 * ad2, td3, ad3, v, engaged, &k3t, &k3a);
    td4 = td + dt * k3t;
    ad4 = ad + dt * k3a;
    accel(s, th + dt * td3, al + dt * ad3, td4, ad4, v, engaged, &k4t, &k4a);
    h6 = dt / 6.0;
    s->theta = th + h6 * (td + 2.0 * td2 + 2.0 * td3 + td4);
    s->alpha = al + h6 * (ad + 2.0 * ad2 + 2.0 * ad3 + ad4);
    s->theta_dot = td + h6 * (k1t + 2.0 * k2t + 2.0 * k3t + k4t);
    s->alpha_dot = ad + h6 * (k1a + 2.0 * k2a + 2.0 * k3a + k4a);
    apply_hard_stop(s);
}

void plant_encoder_counts(const plant_t *s, long *arm, long *pendulum)
{
    double scale = s->p.encoder_counts_per_rev / TWO_PI;
    /* nearbyint: round half to even under the default rounding mode, like Python's round() */
    *arm = (long)nearbyint(s->theta * scale);
    *pendulum = (long)nearbyint(s->alpha * scale);
}
