import Foundation
import Testing
@testable import Sandbox
import CSyscalls

/// Privileges, sessions, descriptors, signals, IPC and the kernel
/// interfaces that Landlock does not cover.
@Suite(.inBothViews) struct ProcessConfinementTests {
    @Test func everyCapabilityIsDroppedAndNoNewPrivsIsSet() throws {
        let code = Attack.prelude + """
            class Header(ctypes.Structure):
                _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
            class Data(ctypes.Structure):
                _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
            header = Header(0x20080522, 0); data = (Data * 2)()
            libc.capget(ctypes.byref(header), data)
            print("effective", data[0].effective | data[1].effective, "permitted", data[0].permitted | data[1].permitted,
                  "inheritable", data[0].inheritable | data[1].inheritable)
            print("bounding", sum(libc.prctl(23, cap, 0, 0, 0) == 1 for cap in range(64)))
            print("ambient", sum(libc.prctl(47, 1, cap, 0, 0) == 1 for cap in range(64)))
            print("no_new_privs", libc.prctl(39, 0, 0, 0, 0))
            """
        let unconfined = try Run.unconfinedPython(code)
        #expect(unconfined.output.last == "no_new_privs 0")
        let confined = try Run.confinedPython(code, in: Scratch())
        #expect(confined.output == ["effective 0 permitted 0 inheritable 0", "bounding 0", "ambient 0", "no_new_privs 1"])
    }

    @Test func theCommandRunsInANewSessionWithoutATerminal() throws {
        let code = "import os\nprint(os.getsid(0) == os.getpid())\ntry:\n    os.open('/dev/tty', os.O_RDWR)\n    print('tty')\nexcept OSError:\n    print('no tty')"
        #expect(try Run.unconfinedPython(code).output.first == "False")
        #expect(try Run.confinedPython(code, in: Scratch()).output == ["True", "no tty"])
    }

    @Test func terminalInjectionIsRefusedInBothRequestWidths() throws {
        // A real pty as stdin: TIOCSTI would type into it.
        var master: Int32 = -1
        var slave: Int32 = -1
        try #require(csb_open_pty(&master, &slave) == 0)
        defer { close(master); close(slave) }
        let code = Attack.prelude + """
            import fcntl, termios
            for label, request in (("TIOCSTI", termios.TIOCSTI), ("TIOCSTI-64", termios.TIOCSTI | (1 << 32)), ("TIOCLINUX", 0x541C)):
                attempt(label, lambda: fcntl.ioctl(0, request, b"x"))
            attempt("TCGETS", lambda: fcntl.ioctl(0, termios.TCGETS, bytes(64)))
            """
        // .never: this test is about the filter on the caller's own terminal, not the relay.
        let confined = try Run.confinedPython(code, in: Scratch()) {
            $0.standardInput = slave
            $0.terminal = .never
        }
        #expect(confined.output == ["TIOCSTI EPERM", "TIOCSTI-64 EPERM", "TIOCLINUX EPERM", "TCGETS ok"])

        // Unconfined, the same ioctl from a process holding the pty succeeds.
        let injected = Process()
        injected.executableURL = URL(fileURLWithPath: Run.python)
        injected.arguments = ["-c", "import fcntl, termios; fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('ok')"]
        injected.standardInput = FileHandle(fileDescriptor: slave, closeOnDealloc: false)
        let out = Pipe()
        injected.standardOutput = out
        try injected.run()
        injected.waitUntilExit()
        #expect(try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self) == "ok\n")
    }

    @Test func theTerminalGuardAloneRefusesInjection() throws {
        // In the sandbox, the new session and the dropped capabilities already
        // stop TIOCSTI, which would hide a broken filter. Here a root process
        // with every capability loads only the guard, so the filter is what
        // the test sees.
        let scratch = Scratch()
        let program = scratch.path + "/guard.bpf"
        try Data(SyscallFilter(options: .init()).argumentGuard()).write(to: URL(fileURLWithPath: program))
        var master: Int32 = -1
        var slave: Int32 = -1
        try #require(csb_open_pty(&master, &slave) == 0)
        defer { close(master); close(slave) }
        let code = Attack.prelude + """
            import fcntl, termios
            data = open(sys.argv[1], "rb").read()
            buffer = ctypes.create_string_buffer(data, len(data))
            class Program(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
            program = Program(len(data) // 8, ctypes.addressof(buffer))
            if sys.argv[2] == "guarded":
                assert libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            attempt("TIOCSTI", lambda: fcntl.ioctl(0, termios.TIOCSTI, b"x"))
            attempt("TIOCSTI-64", lambda: fcntl.ioctl(0, termios.TIOCSTI | (1 << 32), b"x"))
            attempt("TCGETS", lambda: fcntl.ioctl(0, termios.TCGETS, bytes(64)))
            """
        func run(_ mode: String) throws -> [String] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Run.python)
            process.arguments = ["-c", code, program, mode]
            process.standardInput = FileHandle(fileDescriptor: slave, closeOnDealloc: false)
            let out = Pipe()
            process.standardOutput = out
            try process.run()
            process.waitUntilExit()
            return try String(decoding: out.fileHandleForReading.readAll(), as: UTF8.self).split(separator: "\n").map(String.init)
        }
        #expect(try run("bare") == ["TIOCSTI ok", "TIOCSTI-64 ok", "TCGETS ok"])
        #expect(try run("guarded") == ["TIOCSTI EPERM", "TIOCSTI-64 EPERM", "TCGETS ok"])
    }

    @Test func processesOutsideCannotBeTracedOrSignalled() throws {
        let sleeper = Process()
        sleeper.executableURL = URL(fileURLWithPath: "/bin/sleep")
        sleeper.arguments = ["30"]
        try sleeper.run()
        defer { kill(sleeper.processIdentifier, SIGKILL); sleeper.waitUntilExit() }
        let code = Attack.prelude + """
            pid = int(sys.argv[1])
            attempt("kill", lambda: os.kill(pid, 0))
            report("ptrace", libc.ptrace(0x4206, pid, 0, 0))  # PTRACE_SEIZE: does not stop the tracee
            report("process_vm_readv", libc.process_vm_readv(pid, None, 0, None, 0, 0))
            report("pidfd_getfd", libc.syscall(438, 0, 0, 0))
            attempt("kill-init", lambda: os.kill(1, 0))
            """
        let args = [Run.python, "-c", code, String(sleeper.processIdentifier)]
        #expect(try Run.unconfined(args).output.first == "kill ok")
        // Landlock's scope refuses the signal (EPERM); in the sandbox's own
        // pid namespace the host process does not even exist (ESRCH).
        let bare = try Run.confined(args, in: Scratch()) {
            $0.privateNamespaces = false
            $0.view = .host  // the private view is built in the namespaces
        }
        #expect(bare.output == ["kill EPERM", "ptrace EPERM", "process_vm_readv EPERM", "pidfd_getfd EPERM", "kill-init EPERM"])
        let confined = try Run.confined(args, in: Scratch())
        #expect(confined.output == ["kill ESRCH", "ptrace EPERM", "process_vm_readv EPERM", "pidfd_getfd EPERM", "kill-init EPERM"])
        #expect(sleeper.isRunning)
    }

    @Test func namespacesAndMountsAreRefused() throws {
        let code = Attack.prelude + """
            report("unshare-user", libc.unshare(0x10000000))
            report("unshare-mount", libc.unshare(0x00020000))
            report("clone-newuser", libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0))
            report("mount", libc.mount(b"none", b"/usr", b"tmpfs", 0, None))
            report("chroot", libc.chroot(b"/usr"))
            """
        // Unconfined (root), creating a user namespace works; it happens in a
        // throwaway child so the test process is untouched.
        let unconfined = try Run.unconfined(["/usr/bin/unshare", "--user", "/bin/true"])
        #expect(unconfined.termination == .exited(0))
        let confined = try Run.confinedPython(code, in: Scratch())
        #expect(confined.output == ["unshare-user EPERM", "unshare-mount EPERM", "clone-newuser EPERM", "mount EPERM", "chroot EPERM"])
    }

    @Test func dangerousKernelInterfacesFailWithAnErrnoNotAKill() throws {
        let code = Attack.prelude + """
            params = ctypes.create_string_buffer(120)
            report("io_uring_setup", libc.syscall(425, 4, params))
            report("bpf", libc.syscall(321, 0, 0, 0))
            report("perf_event_open", libc.syscall(298, 0, 0, -1, -1, 0))
            report("userfaultfd", libc.syscall(323, 0))
            report("keyctl", libc.syscall(250, 0, 0, 0, 0, 0))
            report("clone3", libc.syscall(435, 0, 0))
            print("still alive")
            """
        let unconfined = try Run.unconfinedPython(code)
        #expect(unconfined.output.first == "io_uring_setup ok")
        let confined = try Run.confinedPython(code, in: Scratch())
        #expect(confined.output == [
            "io_uring_setup ENOSYS", "bpf EPERM", "perf_event_open EPERM", "userfaultfd EPERM", "keyctl EPERM",
            "clone3 ENOSYS", "still alive",
        ])
    }

    @Test func unixSocketsToTheOutsideAreRefused() throws {
        let scratch = Scratch()
        let socketPath = scratch.path + "/service.sock"
        let abstractName = "sandboxed-run-test-\(UUID().uuidString)"
        let server = Process()
        server.executableURL = URL(fileURLWithPath: Run.python)
        server.arguments = ["-c", """
            import socket, time
            a = socket.socket(socket.AF_UNIX); a.bind("\(socketPath)"); a.listen()
            b = socket.socket(socket.AF_UNIX); b.bind("\\0\(abstractName)"); b.listen()
            print("ready", flush=True); time.sleep(30)
            """]
        let ready = Pipe()
        server.standardOutput = ready
        try server.run()
        defer { kill(server.processIdentifier, SIGKILL); server.waitUntilExit() }
        _ = ready.fileHandleForReading.availableData
        let code = Attack.prelude + """
            import socket
            def connect(address):
                s = socket.socket(socket.AF_UNIX); s.connect(address)
            attempt("pathname", lambda: connect(sys.argv[1]))
            attempt("abstract", lambda: connect("\\0" + sys.argv[2]))
            attempt("dgram-pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
            attempt("stream-pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
            """
        let args = [Run.python, "-c", code, socketPath, abstractName]
        #expect(try Run.unconfined(args).output == ["pathname ok", "abstract ok", "dgram-pair ok", "stream-pair ok"])
        let confined = try Run.confined(args, in: scratch)
        if Views.current == .private {
            // The host's socket is not in the view, and the abstract name is
            // not in the sandbox's own network namespace.
            #expect(confined.output == ["pathname ENOENT", "abstract ECONNREFUSED", "dgram-pair EACCES", "stream-pair ok"])
        } else {
            #expect(confined.output == ["pathname EACCES", "abstract EACCES", "dgram-pair EACCES", "stream-pair ok"])
        }
    }

    @Test func memoryBackedFilesCannotBeMadeExecutable() throws {
        let code = Attack.prelude + """
            attempt("memfd", lambda: os.memfd_create("payload"))
            attempt("memfd-noexec-seal", lambda: os.memfd_create("data", 0x8))
            """
        #expect(try Run.unconfinedPython(code).output.first == "memfd ok")
        let confined = try Run.confinedPython(code, in: Scratch())
        #expect(confined.output == ["memfd EACCES", "memfd-noexec-seal ok"])
    }

    @Test func descriptorsAreClosedUnlessKept() throws {
        let scratch = Scratch()
        let path = scratch.file("inherited.txt", "via fd\n")
        let fd = open(path, O_RDONLY)  // no O_CLOEXEC: it would leak into a naive child
        defer { close(fd) }
        let code = "import os, sys\nfd = int(sys.argv[1])\ntry:\n    print(os.read(fd, 100).decode().strip())\nexcept OSError as e:\n    print('closed', e.errno)"
        let args = [Run.python, "-c", code, String(fd)]
        #expect(try Run.confined(args, in: scratch).output == ["closed 9"])
        #expect(try Run.confined(args, in: scratch) { $0.keptDescriptors = [fd] }.output == ["via fd"])
    }

    @Test func theEnvironmentIsCleanUnlessAsked() throws {
        let scratch = Scratch()
        let code = "import os\nprint(sorted(k for k in os.environ if k not in ('LC_CTYPE',)))\nprint(os.environ.get('SECRET_TOKEN'), os.environ.get('EXTRA'))"
        let plain = try Run.confinedPython(code, in: scratch)
        #expect(plain.output == ["['HOME', 'LANG', 'PATH', 'SANDBOXED_RUN', 'SANDBOX_APP_ID', 'SANDBOX_CONTAINER', 'TMPDIR']", "None None"])
        let asked = try Run.confinedPython(code, in: scratch) {
            $0.keptEnvironment = ["SECRET_TOKEN"]
            $0.environment = ["EXTRA": "1"]
        }
        #expect(asked.output.last == "hunter2 1")
    }

    /// A variable the caller sets replaces the sandbox's own of that name
    /// (once in the environment, with the caller's value), and the
    /// environment comes sorted by name.
    @Test func aVariableSetTwiceIsPassedOnceWithTheLastValue() throws {
        let scratch = Scratch()
        var request = LaunchRequest(
            app: try AppID("com.example.environment"), policy: .defaultPolicy, command: ["/bin/true"],
            containerBase: scratch.containers, protectedFolders: [scratch.containers], hostEnvironment: ["TERM": "xterm", "KEPT": "host"])
        request.keptEnvironment = ["KEPT", "TERM"]
        request.environment = ["HOME": "/elsewhere", "KEPT": "set"]
        let environment = try ConfinementPlan(request).environment.map { String(decoding: $0, as: UTF8.self) }
        #expect(environment.filter { $0.hasPrefix("HOME=") } == ["HOME=/elsewhere"])
        #expect(environment.filter { $0.hasPrefix("KEPT=") } == ["KEPT=set"])
        #expect(environment.filter { $0.hasPrefix("TERM=") } == ["TERM=xterm"])
        #expect(environment == environment.sorted())
        #expect(Set(environment.map { $0.prefix { $0 != "=" } }).count == environment.count)
    }
}
