import Foundation
import Testing

/// Attacks on the private view's unix-socket `connect` supervisor, from an
/// attacker review (i23-attack2). Each test is the attack; the unconfined
/// side runs in a host Python script, so the listener is a real host
/// program and its accepts are counted.
@Suite struct UnixSocketSupervisorAttackTests {
    let home = CLI.Home()
    static let app = "com.example.socketattack"

    /// Runs `script` (host Python) with the launcher's path, the app, the home and `extra` as arguments.
    func host(_ script: String, _ extra: String...) throws -> CLI.Result {
        try CLI.program("/usr/bin/python3", ["-c", script, CLI.binary, Self.app, home.path] + extra, environment: home.environment)
    }

    /// When the host's /tmp is what the view shows at /tmp (a grant of /tmp,
    /// or a policy's system path /tmp), the supervisor takes the device of
    /// that folder, the host's disk, for the sandbox's own tmpfs, and
    /// connects the command to any host socket on it: here a host program
    /// listening in the host's /tmp (ssh-agent, tmux, X11 live there).
    @Test(arguments: ["grant", "policy"]) func aHostSocketInTheHostsTmpStaysOutOfReach(how: String) throws {
        let result = try host("""
            import json, os, socket, subprocess, sys, uuid
            binary, app, home = sys.argv[1:4]
            folder = "/tmp/sandboxed-run-test-" + uuid.uuid4().hex[:12]
            os.mkdir(folder)
            path = folder + "/agent.sock"
            listener = socket.socket(socket.AF_UNIX); listener.bind(path); listener.listen()
            try:
                if sys.argv[4] == "grant":
                    subprocess.run([binary, "pick", "--app", app, "--select", "/tmp", "-o", home + "/tmp.bookmark"], check=True, capture_output=True)
                    options = ["--grant", "T=" + home + "/tmp.bookmark"]
                else:
                    with open(home + "/policy.json", "w") as f:
                        json.dump({"com.apple.security.app-sandbox": True,
                                   "org.sandboxed-run.system-paths.read-execute": ["/usr", "/lib", "/lib64", "/bin"],
                                   "org.sandboxed-run.system-paths.read-only": ["/tmp"]}, f)
                    options = ["--policy", home + "/policy.json"]
                code = "import errno, socket, sys\\ntry: socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print('ok')\\nexcept OSError as e: print(errno.errorcode[e.errno])"
                run = subprocess.run([binary, "run", "--app", app] + options + ["--", "/usr/bin/python3", "-c", code, path], capture_output=True, text=True)
                print(run.stdout.strip(), run.stderr.strip().replace("\\n", " | "))
            finally:
                os.unlink(path); os.rmdir(folder)
            """ + "\n", how)
        #expect(result.stdout.hasPrefix("EACCES"), "the command reached a host program's socket: \(result.stdout) \(result.stderr)")
    }

    /// A socket the command is handed (`--keep-fd`, stdin...) was made in the
    /// host's network namespace: connecting it to an abstract name "as
    /// given" looks the name up in the host's namespace, not the sandbox's.
    @Test func aHandedInSocketDoesNotReachTheHostsAbstractNames() throws {
        let result = try host("""
            import os, socket, subprocess, sys, uuid
            binary, app, home = sys.argv[1:4]
            name = "sandboxed-run-test-" + uuid.uuid4().hex
            listener = socket.socket(socket.AF_UNIX); listener.bind("\\0" + name); listener.listen(); listener.setblocking(False)
            handed = socket.socket(socket.AF_UNIX); os.set_inheritable(handed.fileno(), True)
            fd = str(handed.fileno())
            code = "import errno, socket, sys\\ns = socket.socket(fileno=int(sys.argv[1]))\\ntry: s.connect(chr(0) + sys.argv[2]); print('ok')\\nexcept OSError as e: print(errno.errorcode[e.errno])"
            run = subprocess.run([binary, "run", "--app", app, "--keep-fd", fd, "--", "/usr/bin/python3", "-c", code, fd, name],
                                 capture_output=True, text=True, pass_fds=[handed.fileno()])
            try: listener.accept(); accepted = "host accepted"
            except BlockingIOError: accepted = "host accepted nothing"
            print(run.stdout.strip(), accepted, run.stderr.strip().replace("\\n", " | "))
            """ + "\n")
        #expect(result.stdout.contains("host accepted nothing") && !result.stdout.hasPrefix("ok"), "\(result.stdout) \(result.stderr)")
    }

    /// A `connect` that blocks (the listener's backlog is full, the socket
    /// is blocking) must not stop the supervisor: the other processes'
    /// connects (and the terminal relay, in the same loop) go on.
    @Test func aBlockedConnectDoesNotStallTheSupervisor() throws {
        let code = """
            import os, socket, time
            full = socket.socket(socket.AF_UNIX); full.bind("/tmp/full.sock"); full.listen(0)
            free = socket.socket(socket.AF_UNIX); free.bind("\\0free"); free.listen()
            held = []
            while True:
                s = socket.socket(socket.AF_UNIX); s.setblocking(False)
                try: s.connect("/tmp/full.sock"); held.append(s)
                except BlockingIOError: break
            if os.fork() == 0:
                socket.socket(socket.AF_UNIX).connect("/tmp/full.sock"); os._exit(0)
            time.sleep(1)
            other = os.fork()
            if other == 0:
                socket.socket(socket.AF_UNIX).connect("\\0free"); os._exit(0)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if os.waitpid(other, os.WNOHANG)[0]: print("served", flush=True); break
                time.sleep(0.05)
            else:
                print("stalled", flush=True)
            """
        let result = try CLI.run(["run", "--app", Self.app, "--", "/usr/bin/python3", "-c", code], home: home)
        #expect(result.stdout == "served\n", "another process's connect waited 20 s behind a blocked one: \(result.stdout) \(result.stderr)")
    }
}
