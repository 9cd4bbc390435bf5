import Foundation
import Testing

/// What a `--picker` program and a confined command are given: stdin, stdout
/// and stderr, and for the command the live-grant broker's socket
/// (`SANDBOXED_RUN_BROKER_FD`) and each `--keep-fd`; nothing the launcher
/// inherited or opened itself. The launcher is started with descriptors 5
/// (kept) and 6 (not) open, and the picker is run while a supervised
/// connect waits on a full backlog: the supervisor's thread then holds a copy
/// of the seccomp listener, which a picker spawned meanwhile inherited
/// (an unconfined program holding the sandbox's syscall answers).
@Suite struct InheritedDescriptorsTests {
    /// Prints "N TARGET" for each descriptor of this process. The listing's
    /// own descriptor is closed by the time each link is read: skipped.
    static let lister = """
        import os, sys
        lines = []
        for name in sorted(os.listdir("/proc/self/fd"), key=int):
            try:
                target = os.readlink("/proc/self/fd/" + name)
            except FileNotFoundError:
                continue
            except OSError:
                target = "?"
            lines.append(name + " " + target)
        out = open(sys.argv[1], "w") if len(sys.argv) > 1 else sys.stdout
        out.write("".join(line + "\\n" for line in lines))
        """

    /// In the sandbox: a blocking connect to a listener whose backlog is
    /// full (the supervisor answers it from a thread of its own), then an
    /// open panel, which runs the picker while that connect still waits.
    static let panelDuringConnect = """
        import os, socket, subprocess, threading, time
        server = socket.socket(socket.AF_UNIX); server.bind("/tmp/full"); server.listen(0)
        first = socket.socket(socket.AF_UNIX); first.connect("/tmp/full")
        second = socket.socket(socket.AF_UNIX)
        waiting = threading.Thread(target=lambda: second.connect("/tmp/full"), daemon=True)
        waiting.start()
        time.sleep(0.5)
        broker = int(os.environ["SANDBOXED_RUN_BROKER_FD"])
        panel = subprocess.run([os.environ["SANDBOXED_RUN"], "open-panel"], capture_output=True, text=True, pass_fds=[broker])
        print("panel", panel.returncode, "connect waiting", waiting.is_alive(), panel.stderr.strip())
        server.accept(); server.accept()
        """

    static func descriptors(_ listing: String) -> [Int: String] {
        var found: [Int: String] = [:]
        for line in listing.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1)
            if parts.count == 2, let number = Int(parts[0]) { found[number] = String(parts[1]) }
        }
        return found
    }

    @Test(arguments: [[], ["--supervise-metadata"], ["--explain"], ["--view", "host"]])
    func pickersAndCommandsInheritOnlyWhatIsDocumented(options: [String]) throws {
        let home = CLI.Home()
        let picked = home.path + "/Picked"
        try FileManager.default.createDirectory(atPath: picked, withIntermediateDirectories: true)
        let pickerListing = home.path + "/picker-fds"
        let picker = home.path + "/picker"
        let pickerScript = "#!/bin/sh\n/usr/bin/python3 -c \"$(cat '\(home.path)/lister.py')\" '\(pickerListing)'\nprintf '%s\\n' '\(picked)'\n"
        #expect(FileManager.default.createFile(atPath: home.path + "/lister.py", contents: Data(Self.lister.utf8)))
        #expect(FileManager.default.createFile(atPath: picker, contents: Data(pickerScript.utf8), attributes: [.posixPermissions: 0o755]))
        let hostView = options.contains("host")
        // Live grants need the private view: in the host view only the command is looked at.
        let script = "echo broker $SANDBOXED_RUN_BROKER_FD; python3 -c \"$1\"" + (hostView ? "" : "; python3 -c \"$2\"")
        // Descriptors 5 and 6 open in the launcher, as a shell's `5<file` would leave them.
        let launcher = ["-c", "exec 5</dev/null 6</dev/null; exec \"$0\" \"$@\"", CLI.binary, "run", "--app", "com.example.descriptors"]
            + options + ["--keep-fd", "5", "--picker", picker, "--", "/bin/sh", "-c", script, "sh", Self.lister, Self.panelDuringConnect]
        let result = try CLI.program("/bin/sh", launcher, environment: home.environment)
        #expect(result.status == 0, "\(result)")

        let lines = result.stdout.split(separator: "\n").map(String.init)
        let broker = try #require(lines.first.flatMap { Int($0.split(separator: " ").last ?? "") }, "\(result)")
        let command = Self.descriptors(result.stdout.split(separator: "\n").dropFirst().prefix { !$0.hasPrefix("panel") }.joined(separator: "\n"))
        #expect(Set(command.keys) == [0, 1, 2, 5, broker], "the command's descriptors: \(command)")
        #expect(command[5] == "/dev/null" || command[5] == "?", "\(command)")
        #expect(command[broker]?.hasPrefix("socket:") == true || command[broker] == "?", "\(command)")
        guard !hostView else { return }
        #expect(lines.contains { $0.hasPrefix("panel 0 connect waiting True") }, "the picker did not run while the connect waited: \(result)")
        let listing = try String(contentsOfFile: pickerListing, encoding: .utf8)
        let given = Self.descriptors(listing)
        #expect(Set(given.keys) == [0, 1, 2], "the picker's descriptors:\n\(listing)")
        #expect(!listing.contains("seccomp"), "the picker holds the sandbox's seccomp listener:\n\(listing)")
    }
}
