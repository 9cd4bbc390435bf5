@preconcurrency import Glibc

/// Where one launch's wall-clock time goes, phase by phase:
/// `SANDBOXED_RUN_PHASES=1 sandboxed-run run ...` prints each phase's
/// microseconds on stderr when the command has ended (Benchmarks/launch.sh
/// takes medians). Off, a mark is one load and a branch.
public enum LaunchPhases {
    private static let enabled = getenv("SANDBOXED_RUN_PHASES") != nil
    nonisolated(unsafe) private static var last = timespec()
    nonisolated(unsafe) private static var marks: [(name: StaticString, nanoseconds: Int)] = []

    /// Ends the phase called `name`, begun by the previous mark (or `start`).
    public static func mark(_ name: StaticString) {
        guard enabled else { return }
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        marks.append((name, (now.tv_sec - last.tv_sec) * 1_000_000_000 + now.tv_nsec - last.tv_nsec))
        clock_gettime(CLOCK_MONOTONIC, &last)  // the mark's own cost belongs to no phase
    }

    /// Begins the first phase.
    public static func start() {
        guard enabled else { return }
        marks.reserveCapacity(32)
        clock_gettime(CLOCK_MONOTONIC, &last)
    }

    /// Prints the phases, one `phase NAME MICROSECONDS` line each.
    public static func report() {
        guard enabled else { return }
        for (name, nanoseconds) in marks { fputs("phase \(name) \(nanoseconds / 1000)\n", stderr) }
    }
}
