import Foundation
import Testing
import CSyscalls
@testable import Sandbox

/// The private view's network namespace (a policy without a network
/// entitlement): every sandbox has one of its own, holding only its
/// loopback, whether the launcher made it ahead on a thread (as root) or the
/// keeper cloned into it; none is the host's, and no two launches share
/// one, not even two launches of the same plan.
@Suite(.serialized) struct NetworkNamespaceTests {
    /// The namespace's identity, then its interfaces, then whether lo has
    /// ::1 (its loopback is up); then it waits for its stdin to end, so that
    /// the namespaces compared are alive together (a freed namespace's
    /// number is given to the next one).
    static let probe = """
        import os, sys
        print(os.readlink("/proc/self/ns/net"))
        print(",".join(sorted(line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:] if line.strip())))
        try:
            print("lo up" if any(line.split()[-1] == "lo" for line in open("/proc/net/if_inet6")) else "lo down")
        except OSError:
            print("no ipv6")
        sys.stdout.flush()
        sys.stdin.read()
        """

    /// A plan of the probe; each launch's output in a file of its own.
    final class Probe {
        let plan: ConfinementPlan
        let output: String
        /// The probes' stdin: closing it (once, through `release()`) ends them.
        /// Owned here alone: a second close would close whatever another test,
        /// running in parallel in this process, was given that number for.
        private var hold: CInt
        private let descriptors: [CInt]

        init(in scratch: Scratch) throws {
            output = scratch.path + "/.stdout-" + UUID().uuidString
            let out = open(output, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            let null = open("/dev/null", O_RDWR | O_CLOEXEC)
            var pipe: [CInt] = [-1, -1]
            // Close-on-exec at once, as every pipe of the tests' shared process must be.
            #expect(csb_pipe_cloexec(&pipe) == 0)
            hold = pipe[1]
            descriptors = [out, null, pipe[0]]
            var request = LaunchRequest(
                app: try AppID("com.example.network"), policy: .defaultPolicy, command: [Run.python, "-c", NetworkNamespaceTests.probe],
                containerBase: scratch.containers, protectedFolders: [scratch.containers], hostEnvironment: ["LANG": "C.UTF-8"])
            request.view = .private
            request.standardInput = pipe[0]
            request.standardOutput = out
            request.standardError = null
            plan = try ConfinementPlan(request)
        }

        deinit {
            descriptors.forEach { close($0) }
            release()
        }

        /// Ends the probes' stdin. Closes `hold` at most once.
        func release() {
            guard hold >= 0 else { return }
            close(hold)
            hold = -1
        }

        /// Starts one launch and returns once it has printed (within 30 s): its three lines.
        func start(after lines: Int = 0) throws -> (process: ConfinedProcess, output: [String]) {
            let process = try plan.launch()
            let deadline = Date().addingTimeInterval(30)
            var printed: [String] = []
            while printed.count < lines + 3 && Date() < deadline {
                printed = ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
                usleep(2000)
            }
            return (process, Array(printed.dropFirst(lines).prefix(3)))
        }
    }

    /// Whether this machine gives a loopback that is up an IPv6 address (what the probe reads).
    static let hostHasIPv6Loopback = ((try? String(contentsOfFile: "/proc/net/if_inet6", encoding: .utf8)) ?? "")
        .split(separator: "\n").contains { $0.split(separator: " ").last == "lo" }

    @Test func eachLaunchHasANetworkNamespaceOfItsOwnWithOnlyItsLoopback() throws {
        let scratch = Scratch()
        let host = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/net")
        let probe = try Probe(in: scratch), other = try Probe(in: scratch)
        // Alive together: the same plan twice (what it made ahead is taken once), and another plan.
        let first = try probe.start()
        let again = try probe.start(after: 3)
        let third = try other.start()
        probe.release()
        other.release()
        for started in [first, again, third] { #expect(try started.process.wait() == .exited(0)) }
        let namespaces = [first, again, third].map { $0.output.first ?? "" }
        #expect(namespaces.allSatisfy { $0.hasPrefix("net:[") }, "\(namespaces)")
        #expect(!namespaces.contains(host))
        #expect(Set(namespaces).count == 3, "two sandboxes shared a network namespace: \(namespaces)")
        for started in [first, again, third] {
            #expect(started.output.count == 3 && started.output[1] == "lo", "interfaces: \(started.output)")
        }
    }

    @Test(.enabled(if: hostHasIPv6Loopback, "the probe sees the loopback up by its IPv6 address"))
    func theLoopbackIsUpInEveryLaunch() throws {
        let scratch = Scratch()
        let probe = try Probe(in: scratch)
        let first = try probe.start()
        let again = try probe.start(after: 3)
        probe.release()
        for started in [first, again] {
            #expect(try started.process.wait() == .exited(0))
            #expect(started.output.last == "lo up", "\(started.output)")
        }
    }
}
