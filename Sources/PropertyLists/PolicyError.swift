import SystemKit

/// A policy file that cannot be used: names the file, the key and the problem.
public struct PolicyError: Error, Equatable, Sendable, CustomStringConvertible {
    public let file: String
    public let key: String?
    public let problem: String

    public init(file: String, key: String?, problem: String) {
        self.file = file
        self.key = key
        self.problem = problem
    }

    public var description: String {
        if let key {
            "policy \(file): key '\(key)': \(problem)"
        } else {
            "policy \(file): \(problem)"
        }
    }
}
