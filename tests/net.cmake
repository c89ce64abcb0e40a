# The TCP socket net plugin (transports/net_socket.c) over loopback in one process: framing and
# striping for several socket x thread settings, refused messages, dead peers, strangers, abort and
# deadlines. CPU only; 10-20 s on two idle cores (3 s of it waiting out accept deadlines); the
# TIMEOUT leaves room for an oversubscribed host. It also prints loopback GB/s for 16 MiB messages
# (information, not a check).
add_executable(net_socket_test net_socket_test.c)
target_link_libraries(net_socket_test chorus_test_harness chorus_internal Threads::Threads)
chorus_add_test(NAME net_socket COMMAND net_socket_test TIMEOUT 300 LABELS net)
