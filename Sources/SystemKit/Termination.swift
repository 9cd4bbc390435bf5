/// How a process ended: the wait status, decoded in this one place.
public enum Termination: Sendable, Equatable {
    case exited(Int32)
    case signaled(Int32)

    /// From a `waitpid`/`waitid` status word.
    public init(waitStatus status: Int32) {
        let signal = status & 0x7F
        self = signal == 0 ? .exited((status >> 8) & 0xFF) : .signaled(signal)
    }

    /// The shell's convention: the exit status, or 128+N when killed by signal N.
    public var exitCode: Int32 {
        switch self {
        case .exited(let code): code
        case .signaled(let signal): 128 + signal
        }
    }

    /// For messages: "exited with N" or "was killed by signal N".
    public var description: String {
        switch self {
        case .exited(let code): "exited with \(code)"
        case .signaled(let signal): "was killed by signal \(signal)"
        }
    }
}
