# Sourced by every bench/*.sh (`source bench/dds_env.sh`, from the repository root): keep DDS
# traffic on this machine, in a domain of this shell's own, unless the caller chose either.
# The rule for the domain id: 51 + (PID % 50), so parallel runs rarely meet and a user's own
# domains (0-50) are left alone.
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( 51 + ($$ % 50) ))}
